"""``MemoryView``: one run's window onto a ``MemoryBank``, as rollouts use it.

Owns what an agent (and the memory tools) need: which (scope, owner) pairs
a run reads (its run, its task, the global library), where it writes, the
keys to show at each step (``Retriever``), fetching values, and offering
candidates through the ``AdmissionPolicy`` (nearest stored keys first, so
the policy can judge novelty).  It also renders the per-step note
("Shared memory keys: ...") and turns a tool result into a candidate
(key: the call and the head of its result; value: the whole result).

Must not import agents, tools or aggregators (runtime floor): tools reach
it through the ``agentrt.tools._memory_tools`` tools, the loop through ``Agent``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final, final

import anyio

from agentrt.runtime.memory._admission import (
    Admission,
    AdmissionPolicy,
    Candidate,
    ScoredAdmission,
)
from agentrt.runtime.memory._bank import (
    MemoryHit,
    MemoryItem,
    MemoryStore,
    NewItem,
    Owners,
    Scope,
)
from agentrt.runtime.memory._retrieval import Retriever, build_query
from agentrt.runtime.observe._log import get_logger

log = get_logger(__name__)

NOTE_HEADER: Final = "Shared memory keys (fetch a value with memory_get(id)):"
#: Ends the source name of a result the loop got by calling a tool again:
#: a source of its own, as another rollout's result would be.
RECHECK_SUFFIX: Final = "/recheck"
#: Names of the memory tools; their results are never offered back to the bank.
MEMORY_TOOLS: Final = frozenset({"memory_search", "memory_get", "memory_store"})


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 1)] + "..."


@final
class MemoryView:
    """A run's view of a bank (module docstring).

    ``run_id`` and ``task_id`` name the owners of the run and task scopes;
    ``read``: the scopes searched; ``write``: the scope new items go to;
    ``k``: keys shown per step; ``skip_tools``: tools whose results are not
    offered (the memory tools always are skipped).

    Tool results are facts with a *claim* (the call): one becomes shared
    (shown to other rollouts) only once ``corroborate`` sources (rollouts, or
    a rollout's recheck) got the same result, or at once when the tool is one
    of ``verifiers``; a different result of the same call is kept as another
    version with its sources, not refused as a near-duplicate, and the note
    shows how far the calls made agree (``2 of 3 calls agree``).
    Notes the model stores itself (``memory_store``) have no claim and are
    shared at once, marked unverified.

    ``recheck``: a call of a read-only tool whose result is not shared yet
    is made twice at once (``wants_recheck``; the agent loop does it, with
    no model call), the second result offered as ``recheck_source``: two
    calls that agree corroborate it as two rollouts would, since a
    read-only tool's errors (a flaky source) are drawn per call.  A tool
    that answers the same every time (a cache) is no better checked than
    by rollouts reading the same cache.
    """

    def __init__(
        self,
        bank: MemoryStore,
        *,
        run_id: str,
        task_id: str = "",
        read: Sequence[Scope] = ("run", "task", "global"),
        write: Scope = "run",
        admission: AdmissionPolicy | None = None,
        retriever: Retriever | None = None,
        k: int = 5,
        key_chars: int = 160,
        skip_tools: Collection[str] = (),
        corroborate: int = 2,
        verifiers: Collection[str] = (),
        recheck: bool = True,
    ) -> None:
        if corroborate < 1:
            raise ValueError(f"MemoryView corroborate must be >= 1, got {corroborate}")
        self.bank = bank
        self.run_id = run_id
        self.task_id = task_id
        self.write: Scope = write
        self.admission: AdmissionPolicy = admission or ScoredAdmission()
        self.retriever = retriever or Retriever(bank, k=k)
        self.k = k
        self.key_chars = key_chars
        self.skip_tools = MEMORY_TOOLS | frozenset(skip_tools)
        self.corroborate = corroborate
        self.verifiers = frozenset(verifiers)
        self.recheck = recheck
        self._refused: set[str] = set()
        """Claims a result of which the admission policy refused."""
        self.owners: Owners = [(s, self.owner(s)) for s in read]
        self.offered = 0
        self.admitted = 0
        self._offering = anyio.Lock()

    def owner(self, scope: Scope) -> str:
        return {"run": self.run_id, "task": self.task_id, "global": ""}[scope]

    # -- reading ---------------------------------------------------------------

    async def keys_for(self, observation: str, task: str = "") -> list[MemoryHit]:
        """The keys to show at a step, conditioned on its latest observation."""
        return await self.retriever.retrieve(observation, self.owners, task=task, k=self.k)

    async def search(self, query: str, k: int | None = None) -> list[MemoryHit]:
        """Free-text search (the ``memory_search`` tool)."""
        return await self.bank.search(build_query(query), self.owners, k=k or self.k)

    async def get(self, item_id: int) -> MemoryItem | None:
        """An item's value, if this run may see it (counts as a hit)."""
        return await self.bank.get(item_id, self.owners)

    def note(self, hits: Sequence[MemoryHit]) -> str:
        """The per-step note listing ``hits`` (empty string when none)."""
        if not hits:
            return ""
        lines = [NOTE_HEADER]
        lines.extend(f"- [{h.id}] {h.key}{_standing(h)}" for h in hits)
        return "\n".join(lines)

    # -- writing ---------------------------------------------------------------

    async def offer(self, candidate: Candidate) -> tuple[Admission, int | None]:
        """Offer ``candidate``: the policy decides against its nearest
        stored keys; admitted ones are stored in the ``write`` scope (a key
        stored already gives that item's id).  Offers through one view are
        decided one at a time.
        Returns the decision and the new item's id (``None`` if rejected)."""
        self.offered += 1
        # One offer at a time per view: the neighbours a decision reads are
        # then the bank as it is when the item goes in (the bank's unique
        # keys cover views in other processes).
        async with self._offering:
            match = build_query(candidate.key)
            neighbours = await self.bank.search(match, self.owners, k=5) if match else []
            # Results of the same call are versions (agreeing or not), never
            # near-duplicates: the bank keeps each with its sources.
            others = [
                n.key for n in neighbours if not candidate.claim or n.claim != candidate.claim
            ]
            decision = self.admission.decide(candidate, others)
            if not decision.admitted:
                log.debug("memory_rejected", key=candidate.key[:80], reason=decision.reason)
                if candidate.claim:
                    self._refused.add(candidate.claim)
                return decision, None
            item_id = await self._store(candidate, decision)
        self.admitted += 1
        return decision, item_id

    async def _store(self, candidate: Candidate, decision: Admission) -> int:
        return await self.bank.put(
            NewItem(
                scope=self.write,
                owner=self.owner(self.write),
                key=candidate.key,
                value=candidate.value,
                run_id=self.run_id,
                task_id=self.task_id,
                source_rollout=candidate.rollout_id,
                source_step=candidate.step,
                verified=candidate.verified,
                score=decision.score,
                claim=candidate.claim,
                min_support=self.corroborate if candidate.claim else 1,
                confirmed=candidate.confirmed,
            )
        )

    async def wants_recheck(self, tool: str, arguments: str) -> bool:
        """Whether a call of a read-only ``tool`` is worth making twice: a
        second call that agrees corroborates the result, so the other
        rollouts see it without waiting for one of them to make the call.
        Not when rechecks are off, one rollout's result is shared anyway
        (``corroborate`` 1), the tool's results are not offered or are
        confirmed facts (``verifiers``), the admission policy refused a
        result of the call through this view (a near-duplicate of another
        call's: a second one would be refused too), or the bank shares a
        result of the call already.  Rollouts making the call at once each check it: on
        ``bench/memory.py`` checking a call once per run kept 44% of the
        model calls an unchecked bank saves, checking each rollout's 82%."""
        if not self.recheck or self.corroborate <= 1:
            return False
        if tool in self.skip_tools or tool in self.verifiers:
            return False
        claim = self._claim(tool, arguments)
        if claim in self._refused:
            return False
        match = build_query(claim)
        hits = await self.bank.search(match, self.owners, k=10) if match else []
        return not any(h.claim == claim for h in hits)

    async def promote(self, *, min_hits: int = 1, verified_only: bool = True) -> int:
        """Copy this run's used (and verified) items to the global
        experience library; call when the run ends."""
        return await self.bank.promote(
            ("run", self.run_id), ("global", ""), min_hits=min_hits, verified_only=verified_only
        )

    def _claim(self, tool: str, arguments: str) -> str:
        """What a result of the call answers: versions share it."""
        return f"{tool}({_one_line(arguments, self.key_chars // 2)})"

    def tool_candidate(
        self,
        tool: str,
        arguments: str,
        result: str,
        *,
        rollout_id: str,
        step: int,
    ) -> Candidate | None:
        """A verified candidate from a successful tool result, or ``None``
        for the tools whose results are not offered."""
        if tool in self.skip_tools:
            return None
        call = self._claim(tool, arguments)
        key = f"{call} -> {_one_line(result, max(self.key_chars - len(call), 16))}"
        return Candidate(
            key=key,
            value=result,
            rollout_id=rollout_id,
            step=step,
            verified=True,
            claim=call,
            confirmed=tool in self.verifiers,
        )


def _standing(hit: MemoryHit) -> str:
    """What a reader should know of an item beside its key: a note is
    unverified; a tool result says how many of the calls made (a rollout's count
    once, its recheck once more) agree with it."""
    if not hit.verified:
        return " (unverified)"
    if hit.asked > hit.support:
        return f" ({hit.support} of {hit.asked} calls agree)"
    if hit.support > 1:
        return f" ({hit.support} calls agree)"
    return ""


def recheck_source(rollout_id: str) -> str:
    """The source a rollout's second call of a tool stores its result as."""
    return rollout_id + RECHECK_SUFFIX


__all__ = ["MEMORY_TOOLS", "NOTE_HEADER", "RECHECK_SUFFIX", "MemoryView", "recheck_source"]
