"""The aggregation agent (AggAgent): an agent that treats the parallel
trajectories as an environment and reads them through tools
(``TrajectoryStore``, ``store_tools``, ``AggregationAgent``).

May import tools' base protocol, protocols, the runtime floor and the other
aggregators; never the roof.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import msgspec

from agentrt.aggregators._aggregator import (
    AggregationContext,
    AggregationResult,
    BudgetStop,
    check_range,
    emit_all,
    empty_result,
    usable,
)
from agentrt.aggregators._rouge import rouge_l
from agentrt.aggregators._vote import MajorityVote, Normalizer, default_normalizer
from agentrt.protocols._events import VoteCast
from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._trajectory import Step, Trajectory, TrajectorySummary
from agentrt.protocols._usage import Cost
from agentrt.runtime.kernel._errors import BudgetExceeded, ToolError
from agentrt.tools._tool import ToolContext, ToolOutput

MAX_K = 10
MAX_SEGMENT = 5
CLIP_WORDS = 150
#: Most model calls (turns) the aggregation agent may make.
MAX_TURNS: Final = 100
#: Most tokens (prompt + completion, all turns) it may use.
MAX_AGENT_TOKENS: Final = 1_000_000

_RULES = """You aggregate several attempts (trajectories) at one task into one answer.
Use the tools to read them; call exactly one tool per turn.
Rules: tool results inside the trajectories are ground truth; the agents' own reasoning is not.
Count evidence, not trajectories. When trajectories disagree, verify at least one claim by
reading the steps that support it (search_trajectory, get_segment).
When you are sure, call finish(solution, reason): the answer, and the evidence it rests on."""


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

    def run(self, arguments: Mapping[str, Any]) -> str:
        """The tool's text for ``arguments`` (raises ``ToolError`` on a bad id)."""
        return self._handler(arguments)

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


def finish_spec() -> ToolSpec:
    """``finish(solution, reason)``: the aggregation agent's last call."""
    return ToolSpec(
        name="finish",
        description="Give the final solution and why the evidence supports it; ends the task.",
        parameters={
            "type": "object",
            "properties": {
                "solution": {"type": "string", "description": "The final answer."},
                "reason": {
                    "type": "string",
                    "description": "The evidence (trajectory, step, tool result) it rests on.",
                },
            },
            "required": ["solution", "reason"],
            "additionalProperties": False,
        },
    )


_FORCE = (
    "You have no turns left. Call finish now with the best-supported solution and the "
    "evidence it rests on."
)
_ONE_TOOL = "Call exactly one tool per turn: a reading tool, or finish(solution, reason)."


class _Finish(msgspec.Struct, frozen=True):
    solution: str
    reason: str = ""


@final
class AggregationAgent:
    """AggAgent: a model reads the trajectories through ``store_tools``, one
    tool call per turn, and ends with ``finish(solution, reason)``; all its
    calls go through the context's metered backend (on the run's ledger).

    Forced finish: at its last turn (``max_turns``), or when its next turn
    could cross its token cap (``max_tokens``, about one rollout's), it is
    asked to call ``finish`` and offered nothing else (``tool_choice``
    required).  Only when that call yields no usable ``finish`` either, or
    the run's ledger refuses a call, is the answer a majority vote over the
    summaries, with no further model call (the rationale says which).

    ``model``: the model asked (``None``: the context's, else the backend's
    first); ``max_turns``: model calls, forced finish included, 1..100;
    ``max_tokens``: tokens (prompt + completion, all turns), 256..1,000,000;
    ``max_tokens_per_turn``: completion cap per call.  Raises
    ``ConfigError`` naming an option out of its bounds."""

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
            check_range("aggagent", key, value, low, high)
        self.model = model
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_tokens_per_turn = max_tokens_per_turn
        self.normalize = normalize

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        store = TrajectoryStore(kept, context.trajectories)
        session = _Session(self, store, context, task)
        try:
            done = await session.run()
        except BudgetExceeded as exc:
            stop = BudgetStop()
            stop.note(exc)
            return await self._fallback(
                task,
                kept,
                context,
                why=f"agent {stop.why()} after {session.turns} turns",
                cost=session.cost,
                excluded=excluded,
            )
        if done is None:
            return await self._fallback(
                task,
                kept,
                context,
                why=f"agent gave no usable finish, forced at turn {session.turns}",
                cost=session.cost,
                excluded=excluded,
            )
        key = self.normalize(done.solution)
        match = next((s for s in kept if self.normalize(s.answer or "") == key), None)
        winner = match.rollout_id if match else None
        vote = VoteCast(
            run_id="",
            aggregator=self.name,
            round=1,
            candidates=[s.rollout_id for s in kept],
            winner=winner,
        )
        how = "finished" if not session.forced else "was forced to finish"
        return AggregationResult(
            answer=done.solution,
            winner=winner,
            rationale=(
                f"aggregation agent {how} after {session.turns} turns, "
                f"{session.cost.usage.total_tokens} tokens: {done.reason or '(no reason given)'}"
                + ("" if match else "; its answer matches no single rollout")
            ),
            trace=await emit_all(context.events, [vote], run_id=context.run_id),
            cost=session.cost,
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


@final
class _Session:
    """One aggregation agent's conversation: its turns, their cost, and
    whether the finish was forced."""

    def __init__(
        self,
        agent: AggregationAgent,
        store: TrajectoryStore,
        context: AggregationContext,
        task: str,
    ) -> None:
        self.agent = agent
        self.context = context
        self.tools = {t.spec.name: t for t in store_tools(store)}
        self.messages: list[ChatMessage] = [
            SystemMessage(content=_RULES),
            UserMessage(
                content=(
                    f"Task: {task}\n\nTrajectories (id: steps, tokens, tool calls):\n"
                    f"{store.metadata()}"
                )
            ),
        ]
        self.cost = Cost()
        self.turns = 0
        self.forced = False
        self._finish = msgspec.json.Decoder(_Finish)

    def _must_finish(self) -> bool:
        """The last turn, or one more reading turn could cross the token cap."""
        if self.turns >= self.agent.max_turns - 1:
            return True
        used = self.cost.usage.total_tokens
        last = used // max(1, self.turns)  # a turn costs about what the last ones did
        return used + last + self.agent.max_tokens_per_turn > self.agent.max_tokens

    async def _turn(self, *, forced: bool) -> AssistantMessage | None:
        specs = (
            [finish_spec()] if forced else [*(t.spec for t in self.tools.values()), finish_spec()]
        )
        request = ModelRequest(
            messages=self.messages,
            model=self.agent.model or self.context.model,
            tools=specs,
            tool_choice="required" if forced else "auto",
            sampling=SamplingParams(temperature=0.0, max_tokens=self.agent.max_tokens_per_turn),
        )
        reply = await self.context.backend.complete(request)
        self.turns += 1
        self.cost = self.cost + Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        return reply.choices[0].message if reply.choices else None

    def _read_finish(self, call: ToolCall) -> _Finish | None:
        try:
            done = self._finish.decode(call.function.arguments)
        except msgspec.DecodeError:
            return None
        return done if done.solution.strip() else None

    async def run(self) -> _Finish | None:
        """Turns until ``finish``; the forced finish last.  ``None``: even
        the forced turn gave no usable ``finish``."""
        while not self._must_finish():
            message = await self._turn(forced=False)
            calls = message.tool_calls if message is not None else []
            if not calls:
                self.messages += [
                    AssistantMessage(content=message.content if message else ""),
                    UserMessage(content=_ONE_TOOL),
                ]
                continue
            call = calls[0]  # one tool call per turn: the rest are not run
            self.messages.append(
                AssistantMessage(content=message.content if message else None, tool_calls=[call])
            )
            if call.function.name == "finish":
                done = self._read_finish(call)
                if done is not None:
                    return done
                result = "finish needs a non-empty 'solution' (string) and a 'reason' (string)"
            else:
                result = self._run_tool(call)
            self.messages.append(
                ToolMessage(content=result, tool_call_id=call.id, name=call.function.name)
            )
        self.forced = True
        self.messages.append(UserMessage(content=_FORCE))
        message = await self._turn(forced=True)
        finishing = [
            c for c in (message.tool_calls if message else []) if c.function.name == "finish"
        ]
        return self._read_finish(finishing[0]) if finishing else None

    def _run_tool(self, call: ToolCall) -> str:
        tool = self.tools.get(call.function.name)
        if tool is None:
            return f"unknown tool {call.function.name!r}; use {', '.join(self.tools)} or finish"
        try:
            arguments = msgspec.json.decode(call.function.arguments or "{}")
        except msgspec.DecodeError as exc:
            return f"arguments are not JSON: {exc}"
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        try:
            return tool.run(arguments)
        except ToolError as exc:
            return f"error: {exc}"
        except (KeyError, TypeError, ValueError) as exc:
            return f"bad arguments for {call.function.name}: {exc!r}"


__all__ = [
    "MAX_AGENT_TOKENS",
    "MAX_TURNS",
    "AggregationAgent",
    "TrajectoryStore",
    "finish_spec",
    "step_text",
    "store_tools",
]
