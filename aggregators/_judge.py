"""Judges and best-of-N.

Owns the ``Judge`` protocol (a pointwise ``score`` of one summary and a
``compare`` picking the best of a group, each given the aggregation's
context), ``ModelJudge`` (a model reads the *summaries*, never raw traces,
in shuffled order, reasons and ends with a verdict; it holds no backend: it
asks the context's metered one), ``SimulatedJudge`` (knows the ground truth and is right with
probability ``q``, and books its simulated calls on the context's ledger:
tests and the scaling benchmark) and ``BestOfN`` (pointwise: highest score;
pairwise: the champion meets each challenger in turn).

May import protocols, the runtime floor and ``agentrt.aggregators._aggregator``/
``verdict``/``vote``/``workspace``; nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final, Literal, Protocol, TypeVar, final

import anyio
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
from agentrt.aggregators._verdict import (
    VerdictUnparseable,
    cut_off,
    parse_score,
    parse_verdict,
)
from agentrt.aggregators._vote import Normalizer, default_normalizer, plurality
from agentrt.aggregators._workspace import render_summary
from agentrt.protocols._events import ErrorRaised, VoteCast
from agentrt.protocols._messages import AssistantMessage, ChatMessage, SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.protocols._tools import ToolSpec
from agentrt.protocols._trajectory import TrajectorySummary
from agentrt.protocols._usage import Cost, Usage
from agentrt.runtime.kernel._errors import (
    BackendError,
    BudgetExceeded,
    ConfigError,
    InvalidRequestError,
)
from agentrt.runtime.observe._log import get_logger

_T = TypeVar("_T")


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """A group comparison: the index of the best candidate (``None``: the
    judge abstained, e.g. its output did not parse) and what it cost."""

    winner: int | None
    cost: Cost = Cost()


class Score(msgspec.Struct, frozen=True, kw_only=True):
    """A pointwise score in [0, 1] and what it cost."""

    value: float
    cost: Cost = Cost()


class Judge(Protocol):
    """Reads summaries and says which is best supported.  Model calls go
    through ``context.backend`` (metered on the run's ledger); a call the
    ledger refuses raises ``BudgetExceeded``, which a judge lets through so
    that the aggregator stops."""

    async def score(
        self, task: str, summary: TrajectorySummary, context: AggregationContext
    ) -> Score:
        """How likely ``summary``'s answer is right, in [0, 1]."""
        ...

    async def compare(
        self, task: str, candidates: Sequence[TrajectorySummary], context: AggregationContext
    ) -> Verdict:
        """Which of ``candidates`` (two or more) is best."""
        ...


_JUDGE_SYSTEM = (
    "You judge attempts at a task from their summaries. Tool-verified facts are "
    "evidence; an attempt's own reasoning is not. Count evidence, not attempts. "
    "Think it through first, then end your reply with the verdict line."
)
_RETRY = "Your reply had no verdict I could read. Reply with only the line '{line}' ({what})."
#: Most retries of an unparseable reply.
MAX_RETRIES: Final = 5
#: Most tokens a judge reply may take (a retry after a cut-off reply doubles
#: its bound up to this).
MAX_JUDGE_TOKENS: Final = 32_768


def _reasoned_tool(kind: str, field: str, low: int, high: int) -> ToolSpec:
    """Structured output: a ``field`` in ``low..high`` after reasoning, as
    the arguments of a ``verdict`` tool call."""
    return ToolSpec(
        name="verdict",
        description=f"Give your {kind} after reasoning.",
        parameters={
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                field: {"type": "integer", "minimum": low, "maximum": high},
            },
            "required": ["reasoning", field],
            "additionalProperties": False,
        },
    )


def _verdict_tool(n: int) -> ToolSpec:
    """The verdict among ``n`` candidates."""
    return _reasoned_tool("verdict", "verdict", 1, n)


def _score_tool() -> ToolSpec:
    """A score from 0 to 10."""
    return _reasoned_tool("score", "score", 0, 10)


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    """One judge reply: its text, the verdict tool's arguments (when it
    called the tool), whether it was cut off, and its cost."""

    text: str
    arguments: str | None
    truncated: bool
    cost: Cost


async def report_unreadable(
    context: AggregationContext, error: VerdictUnparseable, where: str
) -> str:
    """A judgement none of whose replies could be read: logged and emitted
    as a non-fatal ``ErrorRaised`` naming ``where`` (the comparison) and the
    judge's last reply; the rollouts already ran, so the aggregation goes
    on (the caller decides as documented).  Returns a phrase for the
    rationale."""
    message = f"no readable verdict: {error}"
    get_logger(__name__).warning("judge_unreadable", where=where, error=str(error))
    if context.events is not None:
        await context.events.emit(
            ErrorRaised(run_id=context.run_id, where=where, message=message, fatal=False)
        )
    return f"{where}: {message}"


@final
class ModelJudge:
    """A judge backed by model calls on the context's metered backend (so
    every call, retries included, is reserved on and charged to the run's
    ledger).  It reads summaries, never raw traces.

    ``compare`` shows the candidates in an order drawn from a seeded RNG
    (``shuffle``), so a judge that prefers a position (first, last) picks
    each candidate equally often; it asks the model to reason and end with
    ``VERDICT: <n>``.  ``score`` asks for ``SCORE: <0-10>`` the same way.
    With ``structured`` (the default) the request also offers a ``verdict``
    tool the model must call (``{"reasoning", "verdict"}``, or ``"score"``);
    its arguments are read first, the text when it did not call it, so a
    backend that ignores tools still works, and one that rejects them is
    asked without the tool from then on.  Text is read by
    ``agentrt.aggregators.parse_verdict`` / ``parse_score`` (the last
    explicit verdict, in any common phrasing; scores on the scale the reply
    used, normalized to [0, 1]).

    The failure rules: a reply cut off before it finished (finish reason
    ``length``, or a ``<think>`` block never closed: ``cut_off``) is no
    verdict, whatever it says so far; the same question is asked again with
    twice the ``max_tokens`` (at most 32,768).  A reply with no readable
    verdict (a refusal, a tie, a number out of range) is asked again with
    the reply and a request for the verdict line.  Both count against
    ``retries``; if no reply is readable, ``VerdictUnparseable`` is raised
    (it names the model and the last reply, and says whether it was cut
    off).  Aggregators count such a vote as an abstention; when *no* vote of
    a comparison (no score of a best-of-N) parsed, they report it as a
    non-fatal ``ErrorRaised`` event naming the comparison and the reply,
    decide it without the judge (RTV: the seeded coin; best-of-N: a
    plurality vote) and say so in the rationale (``report_unreadable``).  A
    call that fails or times out (``BackendError``) counts as an abstention
    (``compare``) or a zero (``score``); ``BudgetExceeded`` propagates.

    ``model``: the model to ask (``None``: the context's, else the
    backend's first); ``temperature`` > 0 makes repeated votes (RTV's V)
    differ; ``max_tokens``: each reply's bound, room to reason (what the
    ledger reserves; default 1024); ``timeout_s``: each call's deadline;
    ``retries``: 0..5; ``seed``: the presentation order's RNG;
    ``structured``: offer the verdict tool.  Raises ``ConfigError`` naming
    an option out of bounds."""

    def __init__(
        self,
        *,
        model: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
        retries: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        structured: bool = True,
    ) -> None:
        check_range("judge", "max_tokens", max_tokens, 1, MAX_JUDGE_TOKENS)
        check_range("judge", "retries", retries, 0, MAX_RETRIES)
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.retries = retries
        self.shuffle = shuffle
        self.structured = structured
        self._rng = random.Random(seed)
        # Backends (by name) that rejected a request offering the tool.
        self._no_tools: set[str] = set()

    async def _ask(
        self,
        messages: list[ChatMessage],
        context: AggregationContext,
        tool: ToolSpec | None,
        max_tokens: int,
    ) -> _Reply | None:
        """One call; ``None``: it failed."""
        backend = context.backend
        if tool is not None and backend.name in self._no_tools:
            tool = None
        request = ModelRequest(
            messages=messages,
            model=self.model or context.model,
            tools=[tool] if tool is not None else [],
            tool_choice="required" if tool is not None else "auto",
            sampling=SamplingParams(temperature=self.temperature, max_tokens=max_tokens),
        )
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await backend.complete(request)
        except InvalidRequestError as error:
            if tool is None:
                raise
            # A server without tool calling (or without "required") refuses
            # the request: ask in text, now and from then on.
            get_logger(__name__).warning(
                "judge_tools_refused", backend=backend.name, error=str(error)
            )
            self._no_tools.add(backend.name)
            return await self._ask(messages, context, None, max_tokens)
        except (TimeoutError, BackendError) as error:
            # One failed judgement must not sink an aggregation over rollouts
            # that already ran: it counts as an abstention (compare) or a
            # zero score (score), and the log says why.
            get_logger(__name__).warning(
                "judge_call_failed", backend=backend.name, error=str(error)
            )
            return None
        cost = Cost(usage=reply.usage, model_calls=1, wall_seconds=reply.latency_s)
        if not reply.choices:
            return _Reply(text="", arguments=None, truncated=False, cost=cost)
        choice = reply.choices[0]
        message = choice.message
        arguments = next(
            (c.function.arguments for c in message.tool_calls if c.function.name == "verdict"),
            None,
        )
        text = message.content or ""
        truncated = cut_off(text, choice.finish_reason)
        return _Reply(text=text, arguments=arguments, truncated=truncated, cost=cost)

    async def _until_parsed(
        self,
        user: str,
        context: AggregationContext,
        *,
        what: str,
        line: str,
        tool: ToolSpec | None,
        parse: Callable[[str], _T | None],
    ) -> tuple[_T | None, Cost]:
        """Ask, and ask again on a cut-off or unparseable reply; ``(None,
        cost)`` when a call failed.  Raises ``VerdictUnparseable`` past the
        retries."""
        asked: list[ChatMessage] = [
            SystemMessage(content=_JUDGE_SYSTEM),
            UserMessage(content=user),
        ]
        messages = asked
        max_tokens = self.max_tokens
        cost = Cost()
        last = ""
        truncated = False
        for _ in range(1 + self.retries):
            got = await self._ask(messages, context, tool, max_tokens)
            if got is None:
                return None, cost
            cost = cost + got.cost
            last = got.text or (got.arguments or "")
            truncated = got.truncated
            if truncated:
                # Not a verdict, whatever it says so far: the same question
                # again, with room to finish.
                messages = asked
                max_tokens = min(2 * max_tokens, MAX_JUDGE_TOKENS)
                continue
            for candidate in (got.arguments, got.text):
                value = parse(candidate) if candidate is not None else None
                if value is not None:
                    return value, cost
            messages = [
                *asked,
                AssistantMessage(content=last),
                UserMessage(content=_RETRY.format(line=line, what=what)),
            ]
        model = self.model or context.model or context.backend.default_model
        why = "cut off before it finished" if truncated else "unreadable"
        raise VerdictUnparseable(
            f"no readable verdict ({what}) in {1 + self.retries} replies; "
            f"the last ({why}): {last[-200:]!r}",
            where=f"judge (model {model!r})",
            reply=last,
            cost=cost,
        )

    async def score(
        self, task: str, summary: TrajectorySummary, context: AggregationContext
    ) -> Score:
        value, cost = await self._until_parsed(
            f"Task: {task}\n\nAttempt:\n{render_summary(summary)}\n\n"
            "How likely is this answer correct? Reason briefly, then end with the line "
            "'SCORE: <an integer from 0 to 10>'.",
            context,
            what="an integer from 0 to 10",
            line="SCORE: <number>",
            tool=_score_tool() if self.structured else None,
            parse=parse_score,
        )
        return Score(value=value if value is not None else 0.0, cost=cost)

    async def compare(
        self, task: str, candidates: Sequence[TrajectorySummary], context: AggregationContext
    ) -> Verdict:
        n = len(candidates)
        order = list(range(n))  # order[j]: the candidate shown as attempt j + 1
        if self.shuffle:
            self._rng.shuffle(order)
        blocks = "\n\n".join(
            f"Attempt {j + 1}:\n{render_summary(candidates[i])}" for j, i in enumerate(order)
        )
        shown, cost = await self._until_parsed(
            f"Task: {task}\n\n{blocks}\n\nWhich attempt's answer is best supported by "
            f"evidence? Compare them, then end with the line 'VERDICT: <a number from 1 to {n}>'.",
            context,
            what=f"a number from 1 to {n}",
            line="VERDICT: <number>",
            tool=_verdict_tool(n) if self.structured else None,
            parse=lambda text: parse_verdict(text, n),
        )
        return Verdict(winner=order[shown] if shown is not None else None, cost=cost)


@final
class SimulatedJudge:
    """A judge with known accuracy: given candidates of which some are right
    (their normalized answer equals ``truth``) and some wrong, it picks a
    right one with probability ``q`` (else a wrong one); among candidates all
    right or all wrong it picks uniformly.  ``score`` is 1 for a right answer
    with probability ``q`` (0 for a wrong one with probability ``q``).

    Each simulated call is booked on the context's ledger like a model call
    (``tokens_per_call`` tokens: all but 4 prompt, 4 completion; priced as
    ``model``, else the context's, else the backend's default), so it
    raises ``BudgetExceeded`` where a real judge would.  ``delay_s`` is a
    latency, to observe concurrency (``max_in_flight``)."""

    def __init__(
        self,
        truth: str,
        q: float,
        *,
        seed: int = 0,
        normalize: Normalizer = default_normalizer,
        tokens_per_call: int = 200,
        delay_s: float = 0.0,
        model: str | None = None,
    ) -> None:
        if tokens_per_call < 4:
            raise ConfigError(
                f"tokens_per_call must be >= 4, got {tokens_per_call}", where="SimulatedJudge"
            )
        self.truth = normalize(truth)
        self.q = q
        self.normalize = normalize
        self.rng = random.Random(seed)
        self.tokens_per_call = tokens_per_call
        self.delay_s = delay_s
        self.model = model
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def _right(self, s: TrajectorySummary) -> bool:
        return s.answer is not None and self.normalize(s.answer) == self.truth

    async def _call(self, context: AggregationContext) -> Cost:
        model = self.model or context.model or context.backend.default_model
        usage = Usage(prompt_tokens=self.tokens_per_call - 4, completion_tokens=4)
        with context.ledger.reserve(model, usage.prompt_tokens, usage.completion_tokens) as booked:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await anyio.sleep(self.delay_s)
            finally:
                self.in_flight -= 1
            return booked.charge(usage)

    async def score(
        self, task: str, summary: TrajectorySummary, context: AggregationContext
    ) -> Score:
        cost = await self._call(context)
        honest = self.rng.random() < self.q
        value = 1.0 if self._right(summary) == honest else 0.0
        return Score(value=value, cost=cost)

    async def compare(
        self, task: str, candidates: Sequence[TrajectorySummary], context: AggregationContext
    ) -> Verdict:
        cost = await self._call(context)
        right = [i for i, s in enumerate(candidates) if self._right(s)]
        wrong = [i for i in range(len(candidates)) if i not in right]
        if right and wrong:
            pool = right if self.rng.random() < self.q else wrong
        else:
            pool = list(range(len(candidates)))
        return Verdict(winner=self.rng.choice(pool), cost=cost)


@final
class BestOfN:
    """Best-of-N by a judge (default: a ``ModelJudge``): ``pointwise``
    scores every summary (in parallel) and keeps the highest (a tie broken
    by a coin seeded with ``seed``); ``pairwise`` lets the champion meet
    each challenger in turn.  When the ledger refuses a judge call, no
    further call starts: pointwise keeps the best of the scores it got (a
    plurality vote if it got none), pairwise the champion so far.  A score
    that never parses leaves its candidate unscored; when none parses, or a
    pairwise comparison does not, ``VerdictUnparseable`` names it."""

    name = "best_of_n"

    def __init__(
        self,
        judge: Judge | None = None,
        *,
        mode: Literal["pointwise", "pairwise"] = "pointwise",
        seed: int = 0,
    ) -> None:
        self.judge: Judge = judge if judge is not None else ModelJudge()
        self.mode = mode
        self.seed = seed

    async def aggregate(
        self, task: str, summaries: Sequence[TrajectorySummary], context: AggregationContext
    ) -> AggregationResult:
        kept, excluded = usable(summaries)
        if not kept:
            return empty_result(excluded, "no rollout produced an answer")
        stop = BudgetStop()
        if self.mode == "pointwise":
            best, cost, trace, why = await self._pointwise(task, kept, context, stop)
        else:
            best, cost, trace, why = await self._pairwise(task, kept, context, stop)
        trace = await emit_all(context.events, trace, run_id=context.run_id)
        return AggregationResult(
            answer=best.answer,
            winner=best.rollout_id,
            rationale=why,
            trace=trace,
            cost=cost,
            excluded=excluded,
        )

    async def _pointwise(
        self,
        task: str,
        kept: list[TrajectorySummary],
        context: AggregationContext,
        stop: BudgetStop,
    ) -> tuple[TrajectorySummary, Cost, list[VoteCast], str]:
        scores: list[Score | None] = [None] * len(kept)
        unread: list[VerdictUnparseable] = []

        async def one(i: int) -> None:
            if stop.hit:
                return
            try:
                scores[i] = await self.judge.score(task, kept[i], context)
            except BudgetExceeded as exc:
                stop.note(exc)
            except VerdictUnparseable as exc:
                unread.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(len(kept)):
                tg.start_soon(one, i)
        cost = sum((s.cost for s in scores if s is not None), Cost())
        cost = sum((e.cost for e in unread), cost)
        scored = [i for i, s in enumerate(scores) if s is not None]
        if not scored and unread:
            why = await report_unreadable(context, unread[-1], "best_of_n (pointwise)")
            chosen, agree = plurality(kept)
            return chosen, cost, [], f"{why}; plurality: {agree}"
        if not scored:
            chosen, agree = plurality(kept)
            return chosen, cost, [], f"{stop.why()} before any judge score; plurality: {agree}"
        values = {i: s.value for i, s in enumerate(scores) if s is not None}
        top = max(values.values())
        best = random.Random(self.seed).choice([i for i in scored if values[i] == top])
        vote = VoteCast(
            run_id="",
            aggregator=self.name,
            round=1,
            candidates=[kept[i].rollout_id for i in scored],
            winner=kept[best].rollout_id,
            votes={kept[i].rollout_id: round(values[i] * 100) for i in scored},
        )
        why = f"highest judge score {values[best]:.2f} of {len(kept)}"
        if stop.hit:
            why = (
                f"{stop.why()} after {len(scored)} of {len(kept)} judge scores; "
                f"the highest so far, {values[best]:.2f}"
            )
        return kept[best], cost, [vote], why

    async def _pairwise(
        self,
        task: str,
        kept: list[TrajectorySummary],
        context: AggregationContext,
        stop: BudgetStop,
    ) -> tuple[TrajectorySummary, Cost, list[VoteCast], str]:
        champion = kept[0]
        cost = Cost()
        trace: list[VoteCast] = []
        unreadable: list[str] = []
        for round_no, challenger in enumerate(kept[1:], start=1):
            pair = [champion.rollout_id, challenger.rollout_id]
            try:
                verdict = await self.judge.compare(task, [champion, challenger], context)
            except BudgetExceeded as exc:
                stop.note(exc)
                break
            except VerdictUnparseable as exc:
                where = f"best_of_n (pairwise) comparison of {pair}"
                unreadable.append(await report_unreadable(context, exc, where))
                cost = cost + exc.cost
                continue
            cost = cost + verdict.cost
            if verdict.winner == 1:
                champion = challenger
            trace.append(
                VoteCast(
                    run_id="",
                    aggregator=self.name,
                    round=round_no,
                    candidates=pair,
                    winner=champion.rollout_id,
                )
            )
        why = f"won {len(trace)} pairwise comparisons as champion or challenger"
        if unreadable:
            why += f"; {len(unreadable)} unreadable (the champion stayed): {unreadable[-1]}"
        if stop.hit:
            why = (
                f"{stop.why()} after {len(trace)} of {len(kept) - 1} pairwise comparisons; "
                "the champion so far"
            )
        return champion, cost, trace, why


__all__ = [
    "MAX_JUDGE_TOKENS",
    "MAX_RETRIES",
    "BestOfN",
    "Judge",
    "ModelJudge",
    "Score",
    "SimulatedJudge",
    "Verdict",
    "VerdictUnparseable",
    "render_summary",
    "report_unreadable",
]
