"""Policy over the memory service: routing, dedupe/merge, PII, TTL/capacity, audit, summaries.

Each concern is a pure module (explicit inputs, explicit ``now``); :mod:`memory.policy.manager`
wires them around a :class:`memory.service.MemoryService`.
"""
