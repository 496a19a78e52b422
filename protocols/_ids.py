"""Rollout ids: the structure behind the strings events carry.

A rollout is named by its run, its slot in the run (``r3`` for the fourth
rollout, ``refine1-0`` for PDR's first refinement of round 1), the run's
incarnation that started it (0: the first; a run resumed after a crash
restarts a rollout it cannot take up as incarnation k), and the path of
sub-agent calls below it (``planner-4``, ``coder-7``).  On the wire it is one
string, ``<run>-<slot>[~<k>][.<call>]...``; ``RolloutId`` makes and reads it,
and nothing else does.
"""

from __future__ import annotations

from typing import Self

import msgspec


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


__all__ = ["RolloutId", "is_top_level", "sub_rollout_id", "top_level_id"]
