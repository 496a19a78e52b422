"""What a refining rollout is given: the text form of summaries and PDR's
workspace.

Owns ``render_summary`` (a summary as the compact text judges read and
seeded rollouts see), ``Workspace`` (the bounded set of at most K summaries
that conditions one PDR round, with the seed text it renders) and
``Rollout``, the type of the fresh-rollout callable an aggregation context
may carry.

May import protocols only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from agentrt.protocols._trajectory import TrajectorySummary


def render_summary(summary: TrajectorySummary, *, item_chars: int = 200) -> str:
    """A summary as the compact text a judge reads."""

    def clip(text: str) -> str:
        return text if len(text) <= item_chars else text[: item_chars - 1] + "…"

    lines = [f"answer: {summary.answer if summary.answer is not None else 'None'}"]
    v = summary.verification
    if v is not None:  # the task's tests ran on this answer: judges weigh it
        ran = "timed out" if v.timed_out else f"exit {v.exit_code}"
        lines.append(f"tests ({clip(v.command)}): {'passed' if v.passed else 'failed'} ({ran})")
        for name, results in (("FAIL_TO_PASS", v.fail_to_pass), ("PASS_TO_PASS", v.pass_to_pass)):
            if results:
                good = sum(1 for r in results.values() if r == "passed")
                lines.append(f"{name}: {good}/{len(results)} passed")
        if v.error:
            lines.append(f"tests error: {clip(v.error)}")
    for f in summary.facts:
        mark = "verified" if f.verified else "unverified"
        lines.append(f"fact ({mark}; {f.evidence}): {clip(f.claim)}")
    for title, items in (
        ("conclusion", summary.conclusions),
        ("uncertainty", summary.uncertainties),
        ("hypothesis", summary.hypotheses),
        ("failure", summary.failure_modes),
    ):
        lines.extend(f"{title}: {clip(i)}" for i in items)
    return "\n".join(lines)


_CONTINUE = (
    "Earlier attempts at this task are summarized below. Do not trust them: "
    "their facts may be wrong and their answers unverified. Check what they "
    "claim with tools, and try strategies they did not."
)


class Workspace(msgspec.Struct, frozen=True, kw_only=True):
    """What conditions one round: at most ``k`` summaries of the round before."""

    round: int
    k: int
    summaries: list[TrajectorySummary] = []

    def render(self) -> str:
        """The seed text a rollout gets (empty for the first round)."""
        if not self.summaries:
            return ""
        blocks = "\n\n".join(
            f"Attempt {i + 1}:\n{render_summary(s)}" for i, s in enumerate(self.summaries)
        )
        return f"{_CONTINUE}\n\n{blocks}"


Rollout = Callable[[str, Workspace], Awaitable[TrajectorySummary]]
"""Runs one fresh rollout of ``task`` seeded with the workspace, on the run's
ledger, and returns its summary."""


__all__ = ["Rollout", "Workspace", "render_summary"]
