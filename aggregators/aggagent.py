"""The aggregation agent (AggAgent): an agent that treats the parallel
trajectories as an environment and reads them through tools
(``TrajectoryStore``, ``store_tools``, ``AggregationAgent``).

May import agents, tools' base protocol, protocols, the runtime floor and
the other aggregators; never the roof.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import msgspec

from agentrt.agents import Agent, AgentConfig, AgentLimits
from agentrt.aggregators.base import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators.rouge import rouge_l
from agentrt.aggregators.vote import MajorityVote, Normalizer, default_normalizer
from agentrt.protocols import Budget, Cost, Step, ToolSpec, Trajectory, TrajectorySummary, VoteCast
from agentrt.runtime.budget import BudgetLedger
from agentrt.runtime.errors import BudgetExceeded, ConfigError, ToolError
from agentrt.tools.base import ToolContext, ToolOutput

MAX_K = 10
MAX_SEGMENT = 5
CLIP_WORDS = 150
#: Most model calls (turns) the aggregation agent may make.
MAX_TURNS: Final = 64
#: Most tokens (prompt + completion, all turns) it may use.
MAX_AGENT_TOKENS: Final = 1_000_000

_RULES = """You aggregate several attempts (trajectories) at one task into one answer.
Use the tools to read them; call exactly one tool per turn.
Rules: tool results inside the trajectories are ground truth; the agents' own reasoning is not.
Count evidence, not trajectories. When trajectories disagree, verify at least one claim by
reading the steps that support it (search_trajectory, get_segment).
When you are sure, call finish with the answer."""


def _clip_words(text: str, limit: int = CLIP_WORDS) -> str:
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit]) + " …"


def step_text(step: Step, role: str | None = None) -> str:
    """A step as text: the assistant's words and calls and/or the tool results."""
    parts: list[str] = []
    if role in (None, "assistant") and step.reply is not None and step.reply.choices:
        message = step.reply.choices[0].message
        if message.content:
            parts.append(f"assistant: {message.content}")
        parts.extend(f"call {c.function.name}({c.function.arguments})" for c in message.tool_calls)
    if role in (None, "tool"):
        parts.extend(
            f"tool {r.name}{' (error)' if r.is_error else ''}: {r.content}"
            for r in step.tool_results
        )
    return "\n".join(parts)


@final
class TrajectoryStore:
    """The trajectories an aggregation agent reads, by rollout id."""

    def __init__(
        self, summaries: Sequence[TrajectorySummary], trajectories: Mapping[str, Trajectory]
    ) -> None:
        self.summaries = {s.rollout_id: s for s in summaries}
        self.trajectories = dict(trajectories)

    def _get(self, rollout_id: str) -> Trajectory | None:
        if rollout_id not in self.summaries:
            known = ", ".join(self.summaries)
            raise ToolError(f"unknown trajectory id {rollout_id!r}; known: {known}")
        return self.trajectories.get(rollout_id)

    def metadata(self) -> str:
        lines = []
        for rid, s in self.summaries.items():
            t = self.trajectories.get(rid)
            steps = len(t.steps) if t else 0
            calls = sum(len(st.tool_results) for st in t.steps) if t else 0
            tokens = s.cost.usage.total_tokens
            if t is not None and not tokens:
                tokens = sum(st.reply.usage.total_tokens for st in t.steps if st.reply)
            lines.append(f"- {rid}: {steps} steps, {tokens} tokens, {calls} tool calls")
        return "\n".join(lines)

    def get_solution(self, rollout_id: str | None = None) -> str:
        ids = [rollout_id] if rollout_id else list(self.summaries)
        out = []
        for rid in ids:
            t = self._get(rid)
            last = step_text(t.steps[-1]) if t and t.steps else ""
            answer = self.summaries[rid].answer
            # All of them at once: a shorter excerpt each, to keep the turn small.
            limit = CLIP_WORDS if rollout_id else CLIP_WORDS // 4
            out.append(f"[{rid}] answer: {answer}\nfinal step: {_clip_words(last, limit)}")
        return "\n\n".join(out)

    def search(self, rollout_id: str, query: str, role: str | None = None, k: int = 5) -> str:
        t = self._get(rollout_id)
        if t is None:
            return f"[{rollout_id}] has no recorded steps"
        k = max(1, min(MAX_K, k))
        scored = [
            (rouge_l(query, text).recall, step.index, text)
            for step in t.steps
            if (text := step_text(step, role))
        ]
        scored.sort(key=lambda x: (-x[0], x[1]))
        return (
            "\n\n".join(
                f"[{rollout_id} step {i}] (ROUGE-L recall {r:.2f})\n{_clip_words(text)}"
                for r, i, text in scored[:k]
            )
            or f"[{rollout_id}] no matching steps"
        )

    def segment(self, rollout_id: str, start: int, end: int) -> str:
        t = self._get(rollout_id)
        if t is None:
            return f"[{rollout_id}] has no recorded steps"
        if end < start:
            raise ToolError(f"end ({end}) is before start ({start})")
        end = min(end, start + MAX_SEGMENT - 1)
        steps = [s for s in t.steps if start <= s.index <= end]
        return (
            "\n\n".join(
                f"[{rollout_id} step {s.index}]\n{_clip_words(step_text(s))}" for s in steps
            )
            or f"[{rollout_id}] no steps in {start}..{end} (it has {len(t.steps)})"
        )


Handler = Callable[[Mapping[str, Any]], Awaitable[str]]


@final
class _StoreTool:
    def __init__(
        self,
        name: str,
        description: str,
        properties: dict[str, Any],
        required: list[str],
        handler: Callable[[Mapping[str, Any]], str],
    ) -> None:
        self._spec = ToolSpec(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        )
        self._handler = handler

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.of_text(self._handler(arguments))


def store_tools(store: TrajectoryStore) -> list[_StoreTool]:
    """The three reading tools over ``store``: ``get_solution(id?)``,
    ``search_trajectory(id, query, role?, k <= 10)`` (steps ranked by
    ROUGE-L recall of the query, clipped to ~150 words) and
    ``get_segment(id, start, end)`` (<= 5 steps, clipped)."""
    return [
        _StoreTool(
            "get_solution",
            "The final answer and final step of one trajectory, or of all when id is omitted.",
            {"id": {"type": "string"}},
            [],
            lambda a: store.get_solution(a.get("id")),
        ),
        _StoreTool(
            "search_trajectory",
            f"Steps of one trajectory ranked by ROUGE-L recall of the query (k <= {MAX_K}).",
            {
                "id": {"type": "string"},
                "query": {"type": "string"},
                "role": {"type": "string", "enum": ["assistant", "tool"]},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_K},
            },
            ["id", "query"],
            lambda a: store.search(a["id"], a["query"], a.get("role"), int(a.get("k", 5))),
        ),
        _StoreTool(
            "get_segment",
            f"Steps start..end (inclusive, at most {MAX_SEGMENT}) of one trajectory.",
            {"id": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}},
            ["id", "start", "end"],
            lambda a: store.segment(a["id"], int(a["start"]), int(a["end"])),
        ),
    ]


@final
class AggregationAgent:
    """AggAgent: an ``agentrt.agents.Agent`` over ``store_tools`` plus
    ``finish(answer)``, on the context's metered backend, under a turn and
    a token cap.  If it ends without finishing (a cap hit, the run's budget
    included), the answer is a majority vote over the summaries, with no
    further model call.  ``model``: the model asked
    (``None``: the context's, else the backend's first); ``max_turns``:
    model calls, 1..64; ``max_tokens``: tokens (prompt + completion) the
    agent may use, about one rollout's, 256..1,000,000;
    ``max_tokens_per_turn``: completion cap per call.  Raises
    ``ConfigError`` naming an option out of its bounds.

    The inner agent's calls go through the context's metered backend, so
    each is reserved on and charged to the run's ledger; the agent's own
    ledger (outside the run's tree, so nothing is counted twice) holds its
    caps: ``max_tokens``, ``max_turns`` and whatever the run's ledger had
    left when it started, so it ends ``exhausted`` at the run's cap instead
    of being refused mid-call."""

    name = "aggagent"

    def __init__(
        self,
        *,
        model: str | None = None,
        max_turns: int = 12,
        max_tokens: int = 20_000,
        max_tokens_per_turn: int = 512,
        normalize: Normalizer = default_normalizer,
    ) -> None:
        for key, value, low, high in (
            ("max_turns", max_turns, 1, MAX_TURNS),
            ("max_tokens", max_tokens, 256, MAX_AGENT_TOKENS),
            ("max_tokens_per_turn", max_tokens_per_turn, 1, MAX_AGENT_TOKENS),
        ):
            if not low <= value <= high:
                raise ConfigError(
                    f"{key} must be >= {low} and <= {high}, got {value}", where=f"aggagent.{key}"
                )
        self.model = model
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_tokens_per_turn = max_tokens_per_turn
        self.normalize = normalize

    def _config(self, context: AggregationContext) -> AgentConfig:
        return AgentConfig(
            name="aggagent",
            instructions=_RULES,
            model=self.model or context.model,
            temperature=0.0,
            finish_tool="finish",
            stop_on=["loop"],
            limits=AgentLimits(
                max_steps=self.max_turns,
                max_rollout_tokens=self.max_tokens,
                max_tokens_per_step=self.max_tokens_per_turn,
            ),
        )

    def _ledger(self, context: AggregationContext) -> BudgetLedger:
        """The agent's own caps, within what the run's ledger has left."""
        left = context.ledger.headroom()
        budget = Budget(
            max_tokens=_least(self.max_tokens, left.tokens),
            max_model_calls=_least(self.max_turns, left.calls),
            max_usd=left.usd,
            max_wall_seconds=left.seconds,
        )
        return BudgetLedger(f"{context.run_id or 'run'}-aggagent", budget, context.ledger.prices)

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        store = TrajectoryStore(kept, context.trajectories)
        ledger = self._ledger(context)
        agent = Agent(
            self._config(context),
            backends=[context.backend],
            tools=store_tools(store),
            ledger=ledger,
        )
        prompt = (
            f"Task: {task}\n\nTrajectories (id: steps, tokens, tool calls):\n{store.metadata()}"
        )
        try:
            run = (await agent.run(prompt, run_id=context.run_id or None)).trajectory
        except BudgetExceeded as exc:
            # The run's ledger refused a call the agent's own ledger admitted
            # (another consumer took the room meanwhile): a budget stop too.
            stop = BudgetStop()
            stop.note(exc)
            spent = ledger.spent
            return await self._fallback(
                task, kept, context, why=f"agent {stop.why()}", cost=spent, excluded=excluded
            )
        answer = run.answer if run.status == "finished" else None
        if answer is None or not answer.strip():
            reason = run.stop_reason or ""
            how = (
                "stopped at the budget cap"
                if reason.startswith("budget")
                else f"ended {run.status}"
            )
            return await self._fallback(
                task, kept, context, why=f"agent {how} ({reason})", cost=run.cost, excluded=excluded
            )
        key = self.normalize(answer)
        match = next((s for s in kept if self.normalize(s.answer or "") == key), None)
        winner = match.rollout_id if match else None
        vote = VoteCast(
            run_id="",
            aggregator=self.name,
            round=1,
            candidates=[s.rollout_id for s in kept],
            winner=winner,
        )
        return AggregationResult(
            answer=answer,
            winner=winner,
            rationale=(
                f"aggregation agent finished after {len(run.steps)} turns, "
                f"{run.cost.usage.total_tokens} tokens"
                + ("" if match else "; its answer matches no single rollout")
            ),
            trace=await emit_all(context.events, [vote], run_id=context.run_id),
            cost=run.cost,
            excluded=excluded,
        )

    async def _fallback(
        self,
        task: str,
        kept: list[TrajectorySummary],
        context: AggregationContext,
        *,
        why: str,
        cost: Cost,
        excluded: list[str],
    ) -> AggregationResult:
        """A majority vote over the summaries: no model call."""
        vote = await MajorityVote(self.normalize).aggregate(task, kept, context)
        return msgspec.structs.replace(
            vote,
            rationale=f"{why}; majority fallback: {vote.rationale}",
            cost=cost,
            excluded=excluded,
        )


def _least(cap: int, left: int | None) -> int:
    return cap if left is None else min(cap, left)


__all__ = [
    "MAX_AGENT_TOKENS",
    "MAX_TURNS",
    "AggregationAgent",
    "TrajectoryStore",
    "step_text",
    "store_tools",
]
