"""Shared memory banks (LTS + SLEA): items shared by the rollouts of a run.

- ``bank``: ``MemoryBank`` over SQLite (FTS5/BM25), scopes run / task /
  global, caps and expiry, all I/O off the event loop;
- ``admission``: ``AdmissionPolicy`` and the ``ScoredAdmission`` heuristic
  (novelty, verified, length; rate-limited per rollout);
- ``retrieval``: per-step queries from the current observation, the
  ``Retriever`` and the optional ``Embedder`` hook;
- ``view``: ``MemoryView``, one run's window onto a bank (what the agent
  loop and the memory tools use).

Runtime floor: never imports agents, tools or aggregators.
"""
