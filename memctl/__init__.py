"""``memctl``: the tools around the :mod:`memory` library.

The command line (:mod:`memctl.cli`), the offline demo, the latency bench (with the Supervisor's
handoff overhead), the retrieval / dedupe evaluations and the ranking tuner. They live outside
``memory`` because they need the demo Supervisor app (``supervisor``, ``agents``) and plotting
or evaluation code that the library itself never uses; ``memory`` imports nothing from here.
"""
