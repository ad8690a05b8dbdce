"""Memory the user steers in chat: "what do you remember about me", "forget that", "that's wrong,
it is X", "remember this for the whole team", "undo that" — in zh and en.

:func:`memory.policy.routing.steer_intent` recognises the request (no model needed);
:func:`steer` carries it out through the policy layer, as the Supervisor (audit rows, soft delete
with restore, access rules): sub-agents never see these requests. "That" means the memory most
recently written for the user in this thread (else anywhere); a request that names its target
("forget that I prefer 万元") searches the user's memories for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from memory.errors import MemoryLayerError, NotFound
from memory.namespace import Namespace, ns_key
from memory.policy.manager import Actor, MemoryManager
from memory.policy.routing import SteerIntent, shared_namespace
from memory.records import MemoryRecord

_CJK = re.compile(r"[\u4e00-\u9fff]")
WRITE_ACTIONS = ("add", "update", "merge", "supersede", "restore")
SHOWN_KINDS = ("user_profile", "domain_facts", "shared_context")


def user_namespaces(user_id: str) -> list[Namespace]:
    """What the user's memory is, as far as the user is concerned (never another agent's private notes)."""
    return [(k, user_id) for k in SHOWN_KINDS]


def _recent(mm: MemoryManager, user_id: str, actions: Sequence[str], thread_id: str | None) -> list[str]:
    """Memory ids of the user's namespaces the audit log shows ``actions`` on, newest first;
    this thread's first."""
    events = [e for ns in user_namespaces(user_id) for a in actions
              for e in mm.audit.events(action=a, namespace=ns, limit=20) if e.memory_id]
    events.sort(key=lambda e: -(e.seq or 0))
    mine = [e.memory_id for e in events if thread_id and e.thread_id == thread_id]
    return list(dict.fromkeys([*mine, *(e.memory_id for e in events)]))  # type: ignore[list-item]


def _last_written(mm: MemoryManager, user_id: str, actor: Actor) -> MemoryRecord | None:
    for mid in _recent(mm, user_id, WRITE_ACTIONS, actor.thread_id):
        try:
            return mm.get(mid, actor=actor)
        except NotFound:  # deleted or superseded since
            continue
    return None


def _best(mm: MemoryManager, user_id: str, text: str, actor: Actor, now: datetime | None) -> MemoryRecord | None:
    hits = mm.recall(text, user_namespaces(user_id), top_k=1, actor=actor, now=now)
    return hits[0].record if hits else None


def steer(mm: MemoryManager, intent: SteerIntent, user_id: str, actor: Actor, *, message: str,
          previous_user_message: str = "", now: datetime | None = None) -> str:
    """Carry out one steering request; returns the reply to the user (in the message's language)."""
    zh = bool(_CJK.search(message))
    try:
        return _steer(mm, intent, user_id, actor, zh, previous_user_message, now)
    except MemoryLayerError as exc:
        return f"记忆操作失败：{exc}" if zh else f"The memory operation failed: {exc}"


def _steer(mm: MemoryManager, it: SteerIntent, uid: str, actor: Actor, zh: bool, prev: str,
           now: datetime | None) -> str:
    if it.kind == "recall_me":
        records = [r for ns in user_namespaces(uid) for r in mm.list(ns, limit=50, actor=actor)]
        if not records:
            return "我还没有记住关于你的任何信息。" if zh else "I don't remember anything about you yet."
        lines = [f"- {r.content} ({ns_key(r.namespace).split('/')[0]}, id {r.id[:12]})" for r in records]
        return ("我记得这些：\n" if zh else "Here is what I remember about you:\n") + "\n".join(lines)
    if it.kind == "team":
        content = it.text or prev
        if not content.strip():
            return ("要让团队记住什么？请把内容一起告诉我。" if zh
                    else "What should the team remember? Say it with the request.")
        res = mm.remember(content, shared_namespace(uid), {"type": "domain_facts", "source": "user",
                                                            "extra": {"team": True}},
                          actor=actor, now=now, reason="the user asked the whole team to remember this")
        return (f"好的，整个团队都会记住：{res.record.content}" if zh
                else f"Noted for the whole team: {res.record.content}")
    if it.kind == "restore":
        for mid in _recent(mm, uid, ("delete",), actor.thread_id):
            try:
                rec = mm.restore(mid, actor=actor, now=now)
            except NotFound:
                continue
            return f"已恢复：{rec.content}" if zh else f"Restored: {rec.content}"
        return "没有可以恢复的记忆。" if zh else "There is nothing to restore."
    target = _best(mm, uid, it.text, actor, now) if it.kind == "forget" and it.text else _last_written(mm, uid, actor)
    if it.kind == "correct" and it.text and target is None:
        target = _best(mm, uid, it.text, actor, now)
    if target is None:
        return "我没有找到你指的那条记忆。" if zh else "I could not find the memory you mean."
    if it.kind == "forget":
        mm.delete(target.id, actor=actor, reason="the user asked to forget it", now=now)
        return (f"已忘记：{target.content}（说“恢复刚才那条”可以找回）" if zh
                else f"Forgotten: {target.content} (say \"undo that\" to bring it back)")
    if not it.text:
        return ("请告诉我正确的内容，例如“不对，应该是……”。" if zh
                else "Tell me what is right, e.g. \"that's wrong, it is ...\".")
    # A correction that is a statement of its own replaces the memory; a bare value ("it is
    # yuan") is kept next to what it corrects so the memory still says what it is about.
    long_enough = len(it.text) >= 6 if _CJK.search(it.text) else len(it.text.split()) >= 4
    new = it.text if long_enough else f"{target.content} (corrected by the user: {it.text})"
    rec = mm.update(target.id, new, actor=actor, reason="the user corrected it", now=now)
    return (f"已更正：{target.content} → {rec.content}" if zh else f"Corrected: {target.content} → {rec.content}")


__all__ = ["SHOWN_KINDS", "steer", "user_namespaces"]
