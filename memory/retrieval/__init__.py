"""Ranking steps that run after scoring (pure functions of scored hits, a query plan and ``now``).

* :mod:`memory.retrieval.current`: the current value of a slot first (newest non-superseded
  statement), unless the question asks about the past.
"""
