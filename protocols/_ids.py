"""Rollout ids: the structure behind the strings events carry.

A rollout is named by its run, its slot in the run (``r3`` for the fourth
rollout, ``refine1-0`` for PDR's first refinement of round 1), the run's
incarnation that started it (0: the first; a run resumed after a crash
restarts a rollout it cannot take up as incarnation k), and the path of
sub-agent calls below it (``planner-4``, ``coder-7``).  On the wire it is one
string, ``<run>-<slot>[~<k>][.<call>]...``; ``RolloutId`` makes and reads it,
and nothing else does.

Run ids are minted here too (``new_run_id``): a prefix, a dash and
``RUN_ID_HEX`` random hex digits, whoever starts the run.
"""

from __future__ import annotations

import re
import uuid
from typing import Final, Self

import msgspec

RUN_ID_HEX: Final = 12
"""Random hex digits in a minted run id (48 bits)."""

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]+")


def new_run_id(prefix: str = "run") -> str:
    """A fresh run id, ``<prefix>-<12 hex digits>``; characters a rollout id
    cannot carry in ``prefix`` (``.``, ``~``, spaces...) become ``-`` and it
    is cut to 40 characters, so a task's name can serve as one."""
    safe = _UNSAFE.sub("-", prefix)[:40].strip("-") or "run"
    return f"{safe}-{uuid.uuid4().hex[:RUN_ID_HEX]}"


class RolloutId(msgspec.Struct, frozen=True, gc=False):
    """One rollout's identity (see the module docstring)."""

    run_id: str
    slot: str
    incarnation: int = 0
    path: tuple[str, ...] = ()
    """Sub-agent calls from the top-level rollout down (empty: top level)."""

    def __post_init__(self) -> None:
        for part in (self.slot, *self.path):
            if not part or any(c in part for c in ".~"):
                raise ValueError(
                    f"rollout id parts must be non-empty and free of '.' and '~', got {part!r} "
                    f"(run {self.run_id!r})"
                )
        if self.incarnation < 0:
            raise ValueError(f"incarnation must be >= 0, got {self.incarnation}")

    def __str__(self) -> str:
        text = f"{self.run_id}-{self.slot}"
        if self.incarnation:
            text += f"~{self.incarnation}"
        return "".join((text, *(f".{part}" for part in self.path)))

    @classmethod
    def nth(cls, run_id: str, index: int) -> Self:
        """Rollout ``index`` of the run ``run_id`` (slot ``r<index>``)."""
        return cls(run_id, f"r{index}")

    @classmethod
    def parse(cls, run_id: str, text: str) -> Self:
        """The id ``text`` of a rollout of ``run_id``; ``ValueError`` if it
        is not one."""
        prefix = f"{run_id}-"
        if not text.startswith(prefix):
            raise ValueError(f"{text!r} is not a rollout id of run {run_id!r}")
        head, *path = text[len(prefix) :].split(".")
        slot, tilde, number = head.partition("~")
        if tilde and not number.isdigit():
            raise ValueError(f"{text!r}: the incarnation after '~' must be a number")
        return cls(run_id, slot, int(number) if tilde else 0, tuple(path))

    @property
    def top(self) -> RolloutId:
        """The top-level rollout this one runs under (itself, at the top)."""
        return RolloutId(self.run_id, self.slot, self.incarnation) if self.path else self

    @property
    def below(self) -> str:
        """The path of sub-rollouts under the top-level one, as a string
        (``coder-7.tester-9``; empty at the top level)."""
        return ".".join(self.path)

    def restarted(self, incarnation: int) -> RolloutId:
        """This top-level rollout started again by the run's ``incarnation``."""
        return RolloutId(self.run_id, self.slot, incarnation)

    def call_numbers(self) -> list[int]:
        """The numbers of the sub-agent calls on the path (``coder-7`` -> 7)."""
        numbers = []
        for part in self.path:
            tail = part.rsplit("-", 1)[-1]
            if tail.isdigit():
                numbers.append(int(tail))
        return numbers


def nth_rollout_id(run_id: str, index: int) -> str:
    """The id of rollout ``index`` of a run (``<run>-r<index>``)."""
    return str(RolloutId.nth(run_id, index))


def short_rollout_id(run_id: str | None, rollout_id: str) -> str:
    """``rollout_id`` without its run's id in front (``r3``, ``r0.coder-2``),
    for display; unchanged when it is not a rollout of ``run_id``."""
    if not run_id:
        return rollout_id
    return rollout_id.removeprefix(f"{run_id}-")


def branch_rollout_id(parent: str, step: int) -> str:
    """A fresh id for a branch of rollout ``parent`` taken after its step
    ``step`` (partial-rollout branching): ``<parent>-b<step>-<6 hex>``."""
    return f"{parent}-b{step}-{uuid.uuid4().hex[:6]}"


def call_rollout_id(parent: str, callee: str, number: int) -> str:
    """The id of the sub-agent call number ``number`` to ``callee`` made
    from rollout ``parent`` (``<parent>.<callee>-<number>``)."""
    return sub_rollout_id(parent, f"{callee}-{number}")


def refine_slot(round_: int, index: int) -> str:
    """The slot of parallel-distill-refine's ``index``-th refinement rollout
    of round ``round_`` (``refine1-0``)."""
    return f"refine{round_}-{index}"


def crashed_refinement_id(round_: int, index: int) -> str:
    """The id a refinement rollout that crashed before it had one is
    reported under (``pdr-r1-0``)."""
    return f"pdr-r{round_}-{index}"


def stage_path(stage: str, round_: int) -> str:
    """The path below a pipeline's rollout of its stage ``stage`` in round
    ``round_`` (``solve.1``)."""
    return f"{stage}.{round_}"


def is_top_level(rollout_id: str) -> bool:
    """Whether ``rollout_id`` names a run's own rollout, not a sub-agent call."""
    return "." not in rollout_id


def top_level_id(rollout_id: str) -> str:
    """The id of the run's rollout that ``rollout_id`` runs under (itself, at the top)."""
    return rollout_id.split(".", 1)[0]


def sub_rollout_id(parent: str, call: str) -> str:
    """The id of the call ``call`` (e.g. ``coder-7``) made from rollout ``parent``."""
    if not call or any(c in call for c in ".~"):
        raise ValueError(f"a sub-agent call name must be free of '.' and '~', got {call!r}")
    return f"{parent}.{call}"


__all__ = [
    "RUN_ID_HEX",
    "RolloutId",
    "branch_rollout_id",
    "call_rollout_id",
    "crashed_refinement_id",
    "is_top_level",
    "new_run_id",
    "nth_rollout_id",
    "refine_slot",
    "short_rollout_id",
    "stage_path",
    "sub_rollout_id",
    "top_level_id",
]
