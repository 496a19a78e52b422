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

from agentrt.runtime.memory.admission import (
    Admission,
    AdmissionConfig,
    AdmissionPolicy,
    Candidate,
    ScoredAdmission,
)
from agentrt.runtime.memory.bank import (
    MemoryBank,
    MemoryHit,
    MemoryItem,
    MemoryLimits,
    MemoryStore,
    NewItem,
    Owners,
    Scope,
)
from agentrt.runtime.memory.retrieval import Embedder, Retriever, build_query
from agentrt.runtime.memory.view import MEMORY_TOOLS, NOTE_HEADER, MemoryView

__all__ = [
    "MEMORY_TOOLS",
    "NOTE_HEADER",
    "Admission",
    "AdmissionConfig",
    "AdmissionPolicy",
    "Candidate",
    "Embedder",
    "MemoryBank",
    "MemoryHit",
    "MemoryItem",
    "MemoryLimits",
    "MemoryStore",
    "MemoryView",
    "NewItem",
    "Owners",
    "Retriever",
    "Scope",
    "ScoredAdmission",
    "build_query",
]
