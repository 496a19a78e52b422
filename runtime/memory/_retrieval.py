"""Step-level retrieval (SLEA): the bank's best keys for the current observation.

Owns ``build_query`` (an FTS5 ``MATCH`` expression from the latest
observation -- tool results or the model's text -- and the task, the
observation's terms first), the ``Embedder`` extension point, and
``Retriever``, which asks the bank for BM25 candidates and, with an
embedder, re-ranks them by cosine similarity of the query and the keys.
No embedding model ships here: an embedder is whatever the caller passes.

Must not import agents, tools or aggregators (runtime floor).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol, final

from agentrt.runtime.memory._admission import STOPWORDS
from agentrt.runtime.memory._bank import MemoryHit, MemoryStore, Owners

_WORD = re.compile(r"[0-9A-Za-z_]+")


def query_terms(text: str, limit: int) -> list[str]:
    """Distinct informative terms of ``text`` in order of appearance, at most ``limit``."""
    seen: dict[str, None] = {}
    for raw in _WORD.findall(text):
        term = raw.lower()
        if len(term) < 2 or term in STOPWORDS or term in seen:
            continue
        seen[term] = None
        if len(seen) >= limit:
            break
    return list(seen)


def build_query(observation: str, task: str = "", *, max_terms: int = 24) -> str:
    """An FTS5 ``MATCH`` expression: the informative terms of the
    observation, then of the task, each quoted, OR-ed (BM25 ranks items
    matching more and rarer terms higher).  Empty when there are none."""
    terms = query_terms(observation, max_terms)
    if len(terms) < max_terms:
        terms += [t for t in query_terms(task, max_terms) if t not in terms]
    terms = terms[:max_terms]
    return " OR ".join(f'"{t}"' for t in terms)


class Embedder(Protocol):
    """Embeds texts as vectors (one per text, same dimension); optional."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0 when either vector is zero)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return 0.0 if na == 0 or nb == 0 else dot / (na * nb)


@final
class Retriever:
    """Top-``k`` keys for an observation.  With an ``embedder``, BM25 finds
    ``k * rerank_factor`` candidates and cosine similarity orders them."""

    def __init__(
        self,
        bank: MemoryStore,
        *,
        k: int = 5,
        embedder: Embedder | None = None,
        rerank_factor: int = 4,
        max_terms: int = 24,
    ) -> None:
        self.bank = bank
        self.k = k
        self.embedder = embedder
        self.rerank_factor = max(rerank_factor, 1)
        self.max_terms = max_terms

    async def retrieve(
        self, observation: str, owners: Owners, *, task: str = "", k: int | None = None
    ) -> list[MemoryHit]:
        k = self.k if k is None else k
        match = build_query(observation, task, max_terms=self.max_terms)
        if not match:
            return []
        wide = k * self.rerank_factor if self.embedder is not None else k
        hits = await self.bank.search(match, owners, k=wide)
        if self.embedder is None or len(hits) <= 1:
            return hits[:k]
        query = f"{observation}\n{task}".strip()
        vectors = await self.embedder.embed([query, *(h.key for h in hits)])
        if len(vectors) != len(hits) + 1:
            raise ValueError(
                f"the embedder returned {len(vectors)} vectors for {len(hits) + 1} texts"
            )
        qv = vectors[0]
        scored = sorted(
            zip(hits, vectors[1:], strict=True), key=lambda hv: cosine(qv, hv[1]), reverse=True
        )
        return [h for h, _ in scored[:k]]


__all__ = ["STOPWORDS", "Embedder", "Retriever", "build_query", "cosine", "query_terms"]
