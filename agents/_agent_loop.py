"""The agent loop: ``AgentRollout``, the state and steps of one rollout of an
``Agent`` (``Agent.run`` documents when a rollout ends and what it returns).

May import protocols and the runtime floor; never aggregators or the roof.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from agentrt.agents._behaviour_signals import Fired, SignalTracker
from agentrt.agents._context import ContextWindow, message_tokens
from agentrt.agents._control import RolloutContext, RolloutControl, RolloutResult
from agentrt.agents._mcp_context import RolloutMcpContext
from agentrt.agents._run_options import (
    CLIENT_TOOL_STOP,
    check_schema,
    client_calls_answer,
    client_tool_names,
    offered_client_tools,
    sampling_for,
    schema_feedback,
    schema_instructions,
    structured_answer,
)
from agentrt.agents._token_stream import TokenBuffer, TokenPacer
from agentrt.protocols._events import (
    ErrorRaised,
    Event,
    RolloutFinished,
    RolloutStarted,
    SignalRaised,
    StepRecorded,
    ToolCalled,
    ToolProgress,
)
from agentrt.protocols._messages import AssistantMessage, ChatMessage, ToolCall, UserMessage
from agentrt.protocols._model import ModelReply, ModelRequest
from agentrt.protocols._tools import ToolResult
from agentrt.protocols._trajectory import RoutingDecision, Step, Trajectory, TrajectoryStatus
from agentrt.protocols._usage import Cost
from agentrt.runtime.budget._ledger import BudgetLedger, Reservation
from agentrt.runtime.kernel._errors import (
    BackendError,
    BudgetExceeded,
    ConfigError,
    InvalidRequestError,
    MalformedReply,
    ToolCrashed,
    ToolError,
    UnknownModelError,
)
from agentrt.runtime.kernel._timers import current_task
from agentrt.runtime.memory._view import recheck_source
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._prompt_estimate import prompt_token_bound
from agentrt.runtime.observe._log import get_logger, log_context
from agentrt.runtime.routing._policies import RolloutRouter
from agentrt.runtime.routing._step_signals import NO_SIGNALS

if TYPE_CHECKING:
    from agentrt.agents._agent import Agent
    from agentrt.agents._toolbox import CallsOutcome

#: How long the final events of a cancelled or crashed rollout may take.
FINAL_EVENTS_TIMEOUT_S: Final = 2.0

log = get_logger(__name__)

_Ended = tuple[TrajectoryStatus, str]
"""How a rollout ended: its status and the stop reason."""

_NO_COST: Final = Cost()

_MODEL_CALL_FAILURES = (BackendError, InvalidRequestError, UnknownModelError, TimeoutError)


@dataclass(slots=True)
class _Pending:
    """The step in progress, recorded as such if the rollout is cut short."""

    index: int
    messages: list[ChatMessage]
    routing: RoutingDecision
    reservation: Reservation
    started_at: float
    started: float
    reply: ModelReply | None = None

    def record(
        self,
        *,
        reply: ModelReply | None = None,
        tool_results: tuple[ToolResult, ...] = (),
        error: str | None = None,
    ) -> Step:
        """The step as the trajectory keeps it, timed to now."""
        return Step(
            index=self.index,
            messages=tuple(self.messages),
            reply=reply,
            tool_results=tool_results,
            routing=self.routing,
            started_at=self.started_at,
            duration_s=time.perf_counter() - self.started,
            error=error,
        )


class AgentRollout:
    """One rollout of ``agent``; ``Agent.run`` builds it and calls ``run`` once.

    Each step: the prompt from a ``ContextWindow``; the router picks the tier
    and reserves the call's worst case on the ledger; the backend call under
    ``model_timeout_s``, charged the usage the server reported; the tool
    calls run concurrently (``Toolbox.run_calls``), each under
    ``tool_timeout_s``; a ``Step`` and its events (``ToolCalled``,
    ``StepRecorded``, ``SignalRaised``).  With a memory view, each prompt
    ends with a note of the bank's top keys (after the history, so the
    prefix stays byte-stable) and successful tool results are offered to
    the bank."""

    def __init__(
        self,
        agent: Agent,
        *,
        task: str,
        ctx: RolloutContext,
        ledger: BudgetLedger,
    ) -> None:
        config = agent.config
        self.agent = agent
        self.config = config
        self.task = task
        self.run_id = ctx.run_id
        self.rollout_id = ctx.rollout_id
        self.parent_rollout_id = ctx.parent_rollout_id
        self.ledger = ledger
        self.router = RolloutRouter(agent.policy)
        # The run's options (``RunOptions``): sampling, client tools, schema.
        self.options = options = ctx.options
        where = f"agent {agent.name!r}"
        client_tool_names(options, agent.toolbox.specs, where=where)
        offered = offered_client_tools(options, where=where)
        self.client_tools = frozenset(t.name for t in offered)
        # ``required`` or a named tool choice: the rollout ends with a client
        # call.  The agent's own tools stay the model's choice (``auto``: a
        # required choice they satisfy would never return to the client);
        # when the model would answer instead, the next call is ``forced``:
        # only the offered client tools, one required.  An agent with no
        # tools of its own is forced from its first call.
        self.must_call = options.tool_choice not in ("auto", "none")
        self.forced_tools = sorted(offered, key=lambda t: t.name)
        self.forced = self.must_call and not agent.toolbox.specs
        instructions = config.instructions
        if options.instructions:
            instructions = f"{instructions}\n\n{options.instructions}"
        self.schema_retries = options.response_retries
        if options.response_schema is not None:
            check_schema(options.response_schema, where=f"{where}.options.response_schema")
            instructions = f"{instructions}\n\n{schema_instructions(options.response_schema)}"
        self.window = ContextWindow(
            config.context,
            instructions=instructions,
            task=task,
            tools=[*agent.toolbox.specs, *offered] if offered else agent.toolbox.specs,
            seed=ctx.seed,
            conversation=options.conversation,
        )
        emitter = agent.emitter
        # Signals are computed only for a reader: a stop rule, a router that
        # reads them, a sink of their events, or the result's list.
        self.signals: SignalTracker | None = (
            SignalTracker(config.signals, max_steps=config.limits.max_steps)
            if agent.report_signals
            or config.stop_on
            or getattr(agent.policy, "reads_signals", True)
            or emitter.wants(SignalRaised)
            else None
        )
        self.sampling = sampling_for(
            config.temperature, config.limits.max_tokens_per_step, options, where=where
        )
        # Which per-step events reach a sink, read once: a run sets its
        # emitter's sink before its rollouts start.
        self.wants_progress = emitter.wants(ToolProgress)
        self.wants_calls = emitter.wants(ToolCalled)
        self.wants_steps = emitter.wants(StepRecorded)
        self.steps: list[Step] = []
        self.raised: list[SignalRaised] = []
        self.spent = Cost()
        self.answer: str | None = None
        self.pending: _Pending | None = None
        self.started = time.perf_counter()
        self.observation = task
        """The latest observation (tool results or the model's text): what
        memory retrieval is conditioned on."""
        self.branch_step: int | None = None
        self.mcp_context = RolloutMcpContext(agent.prompt, agent.resources)
        if ctx.resume is not None:
            self._replay(ctx.resume, restored=ctx.restored, charged=ctx.charged)

    def _replay(self, resume: Sequence[Step], *, restored: bool, charged: bool) -> None:
        """Take in earlier steps: their turns enter the context and the
        signal tracker, unrecorded and unemitted; the loop then goes on at
        the next index.  A parent's first steps (a partial-rollout
        continuation) mark ``branch_step``; this rollout's own steps from an
        earlier incarnation (``restored``: a run resumed after a crash) are
        charged to the ledger as already spent and count in the cost (only
        counted, with ``charged``: the ledger holds them already)."""
        where = f"agent {self.agent.name!r} rollout {self.rollout_id} resume"
        for position, step in enumerate(resume):
            if step.index != position:
                raise ConfigError(
                    f"resume steps must be indices 0..{len(resume) - 1} in order; "
                    f"position {position} holds step {step.index}",
                    where=where,
                )
            if step.reply is None or not step.reply.choices:
                raise ConfigError(
                    f"step {step.index} has no reply to resume from ({step.error or 'no reply'})",
                    where=where,
                )
            message = step.reply.message
            if restored:
                model = step.routing.model if step.routing is not None else step.reply.model
                usage = step.reply.usage
                self.spent += (
                    self.ledger.cost_of(model, usage)
                    if charged
                    else self.ledger.restore(model, usage)
                )
            self.window.add_turn(step.index, message, step.tool_results)
            if self.signals is not None:
                self.signals.observe(step.index, message, step.tool_results, step.reply)
            self.observation = (
                "\n".join(r.content for r in step.tool_results) or message.content or ""
            )
        self.steps = list(resume)
        self.branch_step = None if restored else len(resume)
        if self.must_call and resume and resume[-1].reply is not None:
            # its model had answered without a client call: the next is forced
            self.forced = self.forced or not resume[-1].reply.message.tool_calls

    # -- lifecycle -------------------------------------------------------------

    async def run(self, control: RolloutControl) -> RolloutResult:
        await self._emit(
            RolloutStarted(
                run_id=self.run_id,
                rollout_id=self.rollout_id,
                parent_rollout_id=self.parent_rollout_id,
                agent=self.agent.name,
                task=self.task if self.parent_rollout_id is not None else None,
            )
        )
        status: TrajectoryStatus = "cancelled"
        reason = "cancelled"
        try:
            with (
                log_context(rollout_id=self.rollout_id),
                anyio.CancelScope() as scope,
                control.attach(self.rollout_id, scope),
            ):
                status, reason = await self._loop()
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(FINAL_EVENTS_TIMEOUT_S, shield=True):
                await self._finish("cancelled", "cancelled by the caller")
            raise
        except Exception as exc:
            await self._crashed(exc)
            raise
        if scope.cancelled_caught:
            status, reason = "cancelled", "cancelled"
        return await self._finish(status, reason)

    async def _crashed(self, exc: Exception) -> None:
        """A bug: say so in the events, then let it reach the supervisor."""
        log.error("rollout_crashed", agent=self.agent.name, rollout=self.rollout_id, exc_info=exc)
        try:
            with anyio.move_on_after(FINAL_EVENTS_TIMEOUT_S, shield=True):
                await self._emit(
                    ErrorRaised(
                        run_id=self.run_id,
                        where=f"agent {self.agent.name!r} rollout {self.rollout_id}",
                        message=f"{type(exc).__name__}: {exc}",
                        rollout_id=self.rollout_id,
                        fatal=True,
                    )
                )
                await self._finish("failed", f"internal error: {type(exc).__name__}: {exc}")
        except Exception as emit_error:
            exc.add_note(f"reporting the failure failed too: {emit_error!r}")

    async def _finish(self, status: TrajectoryStatus, reason: str) -> RolloutResult:
        pending, self.pending = self.pending, None
        if pending is not None:
            self.steps.append(pending.record(reply=pending.reply, error=reason))
        cost = Cost(
            usd=self.spent.usd,
            usage=self.spent.usage,
            model_calls=self.spent.model_calls,
            wall_seconds=time.perf_counter() - self.started,
        )
        trajectory = Trajectory(
            run_id=self.run_id,
            rollout_id=self.rollout_id,
            agent=self.agent.name,
            task=self.task,
            steps=self.steps,
            answer=self.answer,
            status=status,
            cost=cost,
            parent_rollout_id=self.parent_rollout_id,
            stop_reason=reason,
            branch_step=self.branch_step,
        )
        await self._emit(
            RolloutFinished(
                run_id=self.run_id,
                rollout_id=self.rollout_id,
                status=status,
                answer=self.answer,
                cost=cost,
                stop_reason=reason,
            )
        )
        log.debug(
            "rollout_finished",
            agent=self.agent.name,
            rollout=self.rollout_id,
            status=status,
            reason=reason,
            steps=len(self.steps),
        )
        return RolloutResult(trajectory=trajectory, signals=list(self.raised))

    # -- the loop --------------------------------------------------------------

    async def _loop(self) -> _Ended:
        """The steps, each: ``_begin`` (prompt, route, reservation), the
        model call, ``_act`` (tools, record); an outcome ends the rollout.
        (One coroutine for all steps: docs/design/performance.md.)"""
        limits = self.config.limits
        for index in range(len(self.steps), limits.max_steps):
            if (
                limits.max_rollout_tokens is not None
                and (used := self.spent.usage.total_tokens) >= limits.max_rollout_tokens
            ):
                reason = f"token limit: {used:,} of {limits.max_rollout_tokens:,} tokens used"
                await self._exhausted(index, reason)
                return "exhausted", reason
            begun = await self._begin(index)
            if not isinstance(begun, _Pending):
                return begun
            reply = await self._call_model(begun)
            if not isinstance(reply, ModelReply):
                return reply
            outcome = await self._act(begun, reply)
            if outcome is not None:
                return outcome
        reason = f"max steps ({limits.max_steps}) reached"
        await self._exhausted(limits.max_steps - 1, reason)
        return "exhausted", reason

    async def _begin(self, index: int) -> _Pending | _Ended:
        """The prompt, the routing decision and the budget reservation."""
        budget = self.config.context.budget_tokens
        messages = self.window.messages()
        prompt_tokens = self.window.estimate()
        if self.agent.memory is not None:
            note = await self._memory_note()
            if note is not None:
                messages.append(note)
                prompt_tokens += message_tokens(note, self.window.estimate_text)
        try:
            added = await self.mcp_context.add_to(messages)
        except ToolError as exc:  # the MCP prompt the rollout starts from
            return "failed", str(exc)
        prompt_tokens += sum(message_tokens(m, self.window.estimate_text) for m in added)
        if prompt_tokens > budget:
            return "exhausted", (
                f"context: the prompt needs about {prompt_tokens:,} tokens after compaction, "
                f"over the budget of {budget:,}"
            )
        signals = self.signals
        if signals is not None:
            fired = signals.observe_budget(index, self.ledger.headroom())
            if fired:
                await self._fire(fired)
        try:
            decision, reservation = self.router.reserve(
                self.ledger,
                index,
                NO_SIGNALS if signals is None else signals.routing_signals(),
                prompt_tokens=prompt_tokens,
                max_tokens=self.sampling.max_tokens,
                min_tokens=self.config.limits.min_tokens_per_step,
            )
        except BudgetExceeded as exc:
            await self._exhausted(index, f"budget: {exc}")
            return "exhausted", f"budget: {exc}"
        self.pending = _Pending(
            index=index,
            messages=messages,
            routing=decision,
            reservation=reservation,
            started_at=time.time(),
            started=time.perf_counter(),
        )
        return self.pending

    async def _call_model(self, pending: _Pending) -> ModelReply | _Ended:
        """The model call, charged to the ledger; a failure ends the rollout."""
        limits, decision = self.config.limits, pending.routing
        backend = self.agent.backend_for(decision.model)
        request = ModelRequest(
            messages=pending.messages,
            model=self.agent.served_model(decision.model),
            tools=self.forced_tools if self.forced else self.window.tools,
            tool_choice="required" if self.forced else "auto",
            # Lowered by the ledger when the budget could not fund it in full.
            sampling=self.sampling
            if pending.reservation.max_tokens == self.sampling.max_tokens
            else msgspec.structs.replace(self.sampling, max_tokens=pending.reservation.max_tokens),
            logprobs=self.config.logprobs or self.options.logprobs,
            top_logprobs=self.options.top_logprobs,
            request_id=f"{self.rollout_id}-{pending.index}",
            affinity_key=self.run_id,
        )
        timeout = limits.model_timeout_s
        journal = self.ledger.journal
        booked = ""  # the call's journal handle, on a journaled run; "" once settled
        replayed = journal.replay(request.request_id) if journal is not None else None
        if replayed is not None:
            # An earlier incarnation of the run got this reply and died before
            # committing the step: take it up (it was charged on resume).
            pending.reservation.release()
            self.spent += self.ledger.cost_of(decision.model, replayed.usage)
            pending.reply = replayed
            return replayed
        reservation = pending.reservation
        # Computed only if the call is cancelled before its model's first reply.
        reservation.prompt_bound = functools.partial(
            prompt_token_bound, request.messages, request.tools
        )
        ended = _NO_COST  # what a call that failed was charged
        try:
            # The reservation's ``with``, spelled out (docs/design/performance.md).
            try:
                if journal is not None:
                    booked = await journal.reserved(reservation, request.request_id)
                # One deadline per call: a backend that bounds its calls within
                # our timeout (``call_deadline_s``) raises ``BackendTimeout``
                # itself; a second one would only add work.
                own: float | None = getattr(backend, "call_deadline_s", None)
                pacer = self.agent.emitter.tokens
                if (pacer is not None and pacer.wanted()) or self.ledger.stream_calls:
                    deadline = None if own is not None and own <= timeout else timeout
                    reply = await self._streamed(
                        backend, request, pending.index, pacer, deadline, reservation=reservation
                    )
                elif own is not None and own <= timeout:
                    reply = await backend.complete(request)
                else:
                    reply = await self._bounded(backend, request, timeout)
                self.spent += reservation.charge(reply.usage)
                if journal is not None:
                    await journal.settled(booked, reply.usage, reply)
                    booked = ""
            except BaseException as exc:
                # A call stopped after tokens came is charged what it consumed.
                ended = reservation.end(exc)
                self.spent += ended
                raise
            if not reply.choices:
                raise MalformedReply("the reply has no choices", backend=backend.name)
        except _MODEL_CALL_FAILURES as exc:
            if journal is not None and booked:
                # Released (it cost nothing), or charged what it consumed.
                await journal.settled(booked, ended.usage if ended.model_calls else None)
            text = (
                f"no reply within {limits.model_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            await self._emit(
                ErrorRaised(
                    run_id=self.run_id,
                    where=f"agent {self.agent.name!r} step {pending.index} model "
                    f"{decision.model} (backend {backend.name})",
                    message=text,
                    rollout_id=self.rollout_id,
                )
            )
            self.pending = None
            await self._record(pending.record(error=text))
            return "failed", f"model call failed: {text}"
        pending.reply = reply
        return reply

    async def _bounded(
        self, backend: ModelBackend, request: ModelRequest, limit_s: float
    ) -> ModelReply:
        """``backend.complete`` under the loop's own deadline (for a backend
        that keeps none within it); ``TimeoutError`` past it."""
        deadlines = self.agent.toolbox.deadlines
        task = current_task()
        armed = deadlines.arm(task, limit_s)
        try:
            return await backend.complete(request)
        except asyncio.CancelledError:
            if not await deadlines.expired(task, armed):
                raise
            raise TimeoutError from None
        finally:
            deadlines.disarm(task, armed)

    async def _streamed(
        self,
        backend: ModelBackend,
        request: ModelRequest,
        index: int,
        pacer: TokenPacer | None,
        limit_s: float | None,
        *,
        reservation: Reservation,
    ) -> ModelReply:
        """The model call as a stream, the tokens received counted on
        ``reservation`` (a call cancelled in flight is charged what it
        consumed) and, with a ``pacer`` that wants them, its first sample's
        text sent on as ``TokenDelta`` events (``TokenBuffer``) while it is
        generated; ``limit_s``: the call's time limit, when the backend
        keeps none."""
        deadline = math.inf if limit_s is None else anyio.current_time() + limit_s
        reply: ModelReply | None = None
        reservation.streamed = counted = 0
        paced = pacer is not None and pacer.wanted()
        with anyio.CancelScope(deadline=deadline) as scope:
            async with AsyncExitStack() as stack:
                buffer = (
                    await stack.enter_async_context(
                        TokenBuffer(
                            pacer,
                            self.agent.emitter,
                            run_id=self.run_id,
                            rollout_id=self.rollout_id,
                            step=index,
                        )
                    )
                    if paced and pacer is not None
                    else None
                )
                deltas = backend.stream(request)
                try:
                    async for delta in deltas:
                        if delta.reply is not None:
                            reply = delta.reply
                            continue
                        if delta.restart:  # cut and retried: the reply starts over
                            if buffer is not None:
                                buffer.restart()
                            continue  # the cut attempt's tokens stay counted: generated
                        # One delta a token (a server's chunk), or its logprobs'.
                        counted += len(delta.logprobs) or 1
                        reservation.streamed = counted
                        if (
                            buffer is not None
                            and delta.index == 0
                            and (delta.content or delta.reasoning)
                        ):
                            await buffer.add(delta.content, delta.reasoning)
                finally:
                    close = getattr(deltas, "aclose", None)
                    if close is not None:
                        await close()
        if scope.cancelled_caught:
            raise TimeoutError
        if reply is None:
            raise MalformedReply("the stream ended without a reply", backend=backend.name)
        return reply

    async def _on_tool_notification(
        self, call: ToolCall, kind: str, payload: Mapping[str, Any]
    ) -> None:
        """A running tool's progress or log line, as a ``ToolProgress`` event."""
        progress, total = payload.get("progress"), payload.get("total")
        text = payload.get("message", payload.get("data", ""))
        await self._emit(
            ToolProgress(
                run_id=self.run_id,
                rollout_id=self.rollout_id,
                call_id=call.id,
                tool=call.function.name,
                kind=kind,
                progress=float(progress) if isinstance(progress, int | float) else None,
                total=float(total) if isinstance(total, int | float) else None,
                message=text if isinstance(text, str) else repr(text),
                level=str(payload.get("level", "")),
            )
        )

    async def _act(self, pending: _Pending, reply: ModelReply) -> _Ended | None:
        """Run the reply's tool calls, record the step, read the signals."""
        index, message = pending.index, reply.message
        calls = message.tool_calls
        emitter = self.agent.emitter
        results: tuple[ToolResult, ...] = ()
        answer: str | None = None
        budget_exceeded: str | None = None
        rechecked: list[tuple[ToolCall, ToolResult]] = []
        if self.client_tools:  # (a forced call offers client tools too)
            ended = await self._client_turn(pending, reply)
            if ended is not None:
                return ended
        if calls:
            outcome = await self._run_calls(calls, index, rechecked)
            for crash in outcome.crashed:
                await self._emit(
                    ErrorRaised(
                        run_id=self.run_id,
                        where=f"agent {self.agent.name!r} step {index} tool {crash.name!r} "
                        f"(call {crash.call_id})",
                        message=crash.content,
                        rollout_id=self.rollout_id,
                    )
                )
            if outcome.crashed:
                # A bug in a tool: the step is not committed; the rollout's
                # supervisor restarts it from its committed steps.
                crash = outcome.crashed[0]
                raise ToolCrashed(f"agent {self.agent.name!r} step {index}: {crash.content}")
            results, answer, budget_exceeded = (
                outcome.results,
                outcome.answer,
                outcome.budget_exceeded,
            )
            if self.wants_calls:
                for call, result in zip(calls, results, strict=True):
                    await emitter.emit(
                        ToolCalled(
                            run_id=self.run_id,
                            rollout_id=self.rollout_id,
                            call_id=call.id,
                            tool=call.function.name,
                            arguments=call.function.arguments,
                            is_error=result.is_error,
                            duration_s=result.duration_s,
                        )
                    )
        self.window.add_turn(index, message, results)
        self.pending = None
        if self.agent.memory is not None:
            await self._offer_to_memory(index, message, results, rechecked)
        await self._record(pending.record(reply=reply, tool_results=results))
        fired = (
            self.signals.observe(index, message, results, reply)
            if self.signals is not None
            else None
        )
        if fired:
            await self._fire(fired)
            stop = next((f for f in fired if f.signal in self.config.stop_on), None)
            if stop is not None:
                return "failed", f"signal: {stop.signal} ({stop.detail})"
        if budget_exceeded is not None:
            reason = f"budget: {budget_exceeded}"
            await self._exhausted(index, reason)
            return "exhausted", reason
        if answer is not None or not calls:
            return self._final(answer, message.content or "")
        return None

    async def _run_calls(
        self,
        calls: Sequence[ToolCall],
        index: int,
        rechecked: list[tuple[ToolCall, ToolResult]],
    ) -> CallsOutcome:
        """Step ``index``'s tool calls, through the toolbox; with a bank, the
        read-only ones it does not share a result of yet are made a second
        time alongside (``_recheck`` puts those into ``rechecked``)."""
        checks = await self._to_recheck(calls) if self.agent.memory is not None else []
        run = self.agent.toolbox.run_calls(
            calls,
            run_id=self.run_id,
            rollout_id=self.rollout_id,
            timeout_s=self.config.limits.tool_timeout_s,
            # Progress only when someone reads it: else no sink per call.
            progress=self._on_tool_notification if self.wants_progress else None,
            step=index,
        )
        if not checks:
            return await run
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._recheck, checks, rechecked)
            outcome = await run
        return outcome

    def _final(self, finished: str | None, content: str) -> _Ended | None:
        """The final answer (the finish tool's, else the reply's text); one
        that does not match the run's response schema goes back to the
        model with the reason while retries last (``None``: go on).  When
        the client requires a call to its tools, there is no final answer:
        the next call is forced instead."""
        if self.must_call:
            self.forced = True
            return None
        text = finished if finished is not None else content
        schema = self.options.response_schema
        if schema is not None:
            text, problem = structured_answer(schema, text)
            if problem is not None:
                if self.schema_retries <= 0:
                    return "failed", f"response schema: {problem}"
                self.schema_retries -= 1
                self.window.add_feedback(schema_feedback(problem))
                return None
        self.answer = text
        via = f" ({self.config.finish_tool})" if finished is not None else ""
        return "finished", f"final answer{via}"

    async def _client_turn(self, pending: _Pending, reply: ModelReply) -> _Ended | None:
        """The rollout's end when ``reply`` calls the client's tools, or
        when it was forced to and did not (``None``: neither)."""
        calls = reply.message.tool_calls
        if calls and self.client_tools:
            client = [c for c in calls if c.function.name in self.client_tools]
            if client:
                return await self._end_on_client_calls(pending, reply, client)
        if not self.forced:
            return None
        # Required to call a client tool, the model made no such call: say
        # so rather than ask again (a model that ignores the choice would loop).
        self.window.add_turn(pending.index, reply.message, ())
        self.pending = None
        await self._record(pending.record(reply=reply))
        offered = ", ".join(t.name for t in self.forced_tools)
        return "failed", (
            f"tool_choice: the model was required to call a client tool ({offered}) and did not"
        )

    async def _end_on_client_calls(
        self, pending: _Pending, reply: ModelReply, calls: list[ToolCall]
    ) -> _Ended:
        """The model called the client's tools: the step is recorded without
        running anything (the agent's own calls in that reply are not run
        either); the caller runs the calls and continues the conversation."""
        self.window.add_turn(pending.index, reply.message, ())
        self.pending = None
        await self._record(pending.record(reply=reply))
        self.answer = client_calls_answer(calls)
        return "finished", CLIENT_TOOL_STOP

    # -- shared memory ---------------------------------------------------------

    async def _memory_note(self) -> UserMessage | None:
        """The bank's top keys for the latest observation, as a note."""
        memory = self.agent.memory
        if memory is None:
            return None
        text = memory.note(await memory.keys_for(self.observation, self.task))
        return UserMessage(content=text) if text else None

    async def _offer_to_memory(
        self,
        index: int,
        message: AssistantMessage,
        results: Sequence[ToolResult],
        rechecked: Sequence[tuple[ToolCall, ToolResult]],
    ) -> None:
        """Offer successful tool results to the bank, then the ``rechecked``
        calls' (``_recheck``); note the observation."""
        self.observation = "\n".join(r.content for r in results) or message.content or ""
        memory = self.agent.memory
        if memory is None:  # the loop calls this only with a bank
            return
        arguments = {c.id: c.function.arguments for c in message.tool_calls}
        for result in results:
            if result.is_error:
                continue
            candidate = memory.tool_candidate(
                result.name,
                arguments.get(result.call_id, ""),
                result.content,
                rollout_id=self.rollout_id,
                step=index,
            )
            if candidate is not None:
                await memory.offer(candidate)
        # The second calls' results last: each is a source of its own.
        for call, result in rechecked:
            candidate = memory.tool_candidate(
                result.name,
                call.function.arguments,
                result.content,
                rollout_id=recheck_source(self.rollout_id),
                step=index,
            )
            if candidate is not None:
                await memory.offer(candidate)

    async def _to_recheck(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls to make twice: those of read-only tools (MCP's
        ``readOnlyHint``: calling again has no effect) whose result the
        bank does not share yet."""
        memory = self.agent.memory
        assert memory is not None
        twice: list[ToolCall] = []
        for call in calls:
            entry = self.agent.toolbox.registry.entry(call.function.name)
            if entry is None or not entry.spec.annotations.get("readOnlyHint"):
                continue
            if await memory.wants_recheck(call.function.name, call.function.arguments):
                twice.append(call)
        return twice

    async def _recheck(
        self, calls: Sequence[ToolCall], into: list[tuple[ToolCall, ToolResult]]
    ) -> None:
        """Make ``calls`` a second time, alongside the first (no model call),
        and put the successful results ``into`` the list the bank is offered
        them from as a source of their own (``_offer_to_memory``): one that
        agrees with the first shares it (two calls corroborate it), one that
        does not is kept as a version and neither is shared."""
        again = [msgspec.structs.replace(c, id=f"{c.id}-recheck") for c in calls]
        outcome = await self.agent.toolbox.run_calls(
            again,
            run_id=self.run_id,
            rollout_id=self.rollout_id,
            timeout_s=self.config.limits.tool_timeout_s,
        )
        crashed = {r.call_id for r in outcome.crashed}
        into.extend(
            (call, result)
            for call, result in zip(calls, outcome.results, strict=True)
            if not result.is_error and result.call_id not in crashed
        )

    # -- recording -------------------------------------------------------------

    async def _emit(self, event: Event) -> None:
        await self.agent.emitter.emit(event)

    async def _record(self, step: Step) -> None:
        self.steps.append(step)
        if self.wants_steps:
            await self.agent.emitter.emit(
                StepRecorded(run_id=self.run_id, rollout_id=self.rollout_id, step=step)
            )

    async def _exhausted(self, step: int, reason: str) -> None:
        if self.signals is not None:
            await self._fire(self.signals.exhausted(step, reason))

    async def _fire(self, fired: Sequence[Fired]) -> None:
        for f in fired:
            event = await self.agent.emitter.emit(
                SignalRaised(
                    run_id=self.run_id,
                    rollout_id=self.rollout_id,
                    signal=f.signal,
                    step=f.step,
                    detail=f.detail,
                    value=f.value,
                )
            )
            self.raised.append(event)


__all__ = ["FINAL_EVENTS_TIMEOUT_S", "AgentRollout"]
