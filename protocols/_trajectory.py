"""Steps, trajectories and their structured summaries (Re-TRAC sections).

A ``Trajectory`` is one rollout of an agent: its steps in order.  A
``TrajectorySummary`` is what judges compare and what later rollouts are
seeded with: the answer (or none), facts with evidence, conclusions,
sources, uncertainties, hypotheses tried, failure modes and cost.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agentrt.protocols._messages import ChatMessage
from agentrt.protocols._model import ModelReply
from agentrt.protocols._tools import ToolResult
from agentrt.protocols._usage import Cost

#: Bumped when a persisted type changes shape incompatibly.
SCHEMA_VERSION = 1

TrajectoryStatus = Literal["running", "finished", "failed", "cancelled", "exhausted"]


# gc=False: frozen values holding no reference cycles (only other wire values,
# strings, numbers and lists of them), kept by the thousand while rollouts run;
# the cyclic collector need not track them.
class RoutingDecision(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """Which model the router picked for a step, and why."""

    model: str
    policy: str
    reason: str
    tier: str = ""
    budget_left_usd: float | None = None
    budget_left_tokens: int | None = None


class Step(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One step of a rollout: the request context, the reply, the tool
    results and the routing decision, with timings.

    ``messages`` and ``tool_results`` are tuples: a step is a record, and a
    tuple of untracked values leaves the cyclic collector's lists at its
    first collection, where a list would be walked at every full collection
    for as long as the trajectory lives (the prompt of step k holds about
    2k messages: a list per step makes that quadratic in the steps)."""

    index: int
    messages: tuple[ChatMessage, ...]
    reply: ModelReply | None = None
    tool_results: tuple[ToolResult, ...] = ()
    routing: RoutingDecision | None = None
    started_at: float = 0.0
    duration_s: float = 0.0
    error: str | None = None
    schema_version: int = SCHEMA_VERSION


class Trajectory(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A whole rollout."""

    run_id: str
    rollout_id: str
    agent: str
    task: str
    steps: list[Step] = []
    answer: str | None = None
    status: TrajectoryStatus = "running"
    cost: Cost = Cost()
    parent_rollout_id: str | None = None
    stop_reason: str | None = None
    """Why the rollout ended, for people and triage: ``final answer``,
    ``max steps (20)``, ``budget: ...``, ``signal: loop``, ``cancelled``..."""
    schema_version: int = SCHEMA_VERSION
    branch_step: int | None = None
    """For a continuation branched from ``parent_rollout_id`` (partial
    rollouts): the index of the parent's step it re-sampled.  Its steps
    before that index are the parent's, copied; ``cost`` covers only the
    continuation's own calls."""


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """A claim with where it came from and whether a tool result backs it."""

    claim: str
    evidence: str = ""
    source_step: int | None = None
    verified: bool = False


class Verification(msgspec.Struct, frozen=True, kw_only=True):
    """A task's tests run on a rollout's answer (its diff, applied to a
    fresh checkout of the base): ``passed`` when every named test passed
    (without named tests: the command exited 0) in time; ``error`` when
    it could not run (a patch that does not apply, no sandbox) or a test
    had no result."""

    passed: bool
    command: str
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    output: str = ""
    """The end of the command's stdout and stderr."""
    error: str = ""
    fail_to_pass: dict[str, str] = {}
    """Each FAIL_TO_PASS test id's result: ``passed``, ``failed`` or ``not run``."""
    pass_to_pass: dict[str, str] = {}
    """Each PASS_TO_PASS test id's result, likewise."""


class TrajectorySummary(msgspec.Struct, frozen=True, kw_only=True):
    """A compact, structured account of one finished rollout."""

    rollout_id: str
    answer: str | None = None
    facts: list[Fact] = []
    conclusions: list[str] = []
    sources: list[str] = []
    uncertainties: list[str] = []
    hypotheses: list[str] = []
    progress: list[str] = []
    failure_modes: list[str] = []
    cost: Cost = Cost()
    schema_version: int = SCHEMA_VERSION
    verification: Verification | None = None
    """The task's verifier on this rollout's result (tasks with a test command)."""
