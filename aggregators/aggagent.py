"""The aggregation agent (AggAgent): an agent that treats the parallel
trajectories as an environment and reads them through tools.

Owns ``TrajectoryStore`` (the trajectories and summaries by rollout id, and
what the tools read from them), the tools ``get_solution(id?)``,
``search_trajectory(id, query, role?, k <= 10)`` (steps ranked by ROUGE-L
recall of the query, clipped to ~150 words), ``get_segment(id, start, end)``
(<= 5 steps, clipped) and the built-in ``finish(answer)``, and
``AggregationAgent``, which runs an ``agentrt.agents.Agent`` over them with a
turn cap and a token cap (about one rollout's worth).  When the agent ends
without finishing (a cap hit), the answer falls back to a majority vote over
the summaries: no further model call, so the cost stays bounded.

May import agents, tools' base protocol, protocols and the other
aggregators; never the roof.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, final

import msgspec

from agentrt.agents import Agent, AgentConfig, AgentLimits
from agentrt.agents.recording import EventEmitter
from agentrt.aggregators.base import AggregationResult, emit_all, empty_result, usable
from agentrt.aggregators.rouge import rouge_l
from agentrt.aggregators.vote import MajorityVote, Normalizer, default_normalizer
from agentrt.protocols import Step, ToolSpec, Trajectory, TrajectorySummary, VoteCast
from agentrt.runtime.errors import ToolError
from agentrt.runtime.models.base import ModelBackend
from agentrt.tools.base import ToolContext, ToolOutput

MAX_K = 10
MAX_SEGMENT = 5
CLIP_WORDS = 150

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
    """The three reading tools over ``store``."""
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
    """AggAgent (see the module docstring).  ``max_turns``: model calls;
    ``max_tokens``: tokens (prompt + completion) the agent may use, about one
    rollout's; ``max_tokens_per_turn``: completion cap per call."""

    name = "aggagent"

    def __init__(
        self,
        backend: ModelBackend,
        *,
        model: str | None = None,
        max_turns: int = 12,
        max_tokens: int = 20_000,
        max_tokens_per_turn: int = 512,
        normalize: Normalizer = default_normalizer,
    ) -> None:
        self.backend = backend
        self.config = AgentConfig(
            name="aggagent",
            instructions=_RULES,
            model=model,
            temperature=0.0,
            finish_tool="finish",
            stop_on=["loop"],
            limits=AgentLimits(
                max_steps=max_turns,
                max_rollout_tokens=max_tokens,
                max_tokens_per_step=max_tokens_per_turn,
            ),
        )
        self.normalize = normalize

    async def aggregate(
        self,
        task: str,
        summaries: Sequence[TrajectorySummary],
        *,
        trajectories: Mapping[str, Trajectory] | None = None,
        events: EventEmitter | None = None,
        run_id: str = "",
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        store = TrajectoryStore(kept, trajectories or {})
        agent = Agent(self.config, backends=[self.backend], tools=store_tools(store))
        prompt = (
            f"Task: {task}\n\nTrajectories (id: steps, tokens, tool calls):\n{store.metadata()}"
        )
        result = await agent.run(prompt, run_id=run_id or None)
        run = result.trajectory
        answer = run.answer if run.status == "finished" else None
        if answer is None or not answer.strip():
            fallback = await MajorityVote(self.normalize).aggregate(task, kept)
            why = f"agent ended {run.status} ({run.stop_reason}); majority fallback: "
            return msgspec.structs.replace(
                fallback,
                rationale=why + fallback.rationale,
                cost=run.cost,
                excluded=excluded,
                trace=await emit_all(events, fallback.trace, run_id=run_id),
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
            trace=await emit_all(events, [vote], run_id=run_id),
            cost=run.cost,
            excluded=excluded,
        )


__all__ = ["AggregationAgent", "TrajectoryStore", "step_text", "store_tools"]
