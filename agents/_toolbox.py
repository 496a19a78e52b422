"""The tools of one agent, and running one assistant message's tool calls:
``Toolbox`` and the built-in finish tool.

May import protocols, the runtime floor and ``agentrt.tools._tool``; never
aggregators or the roof.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

import anyio
import msgspec

from agentrt.protocols._messages import ToolCall
from agentrt.protocols._tools import ToolResult, ToolSpec
from agentrt.runtime.kernel._errors import BudgetExceeded, ConfigError, ToolError
from agentrt.runtime.kernel._timers import Armed, TaskDeadlines, current_task
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._approval import ApprovalGate
from agentrt.tools._tool import NotificationSink, Tool, ToolContext, ToolOutput
from agentrt.tools._tool_registry import ToolRegistry
from agentrt.tools._validation import invalid_arguments

log = get_logger(__name__)


def finish_spec(name: str) -> ToolSpec:
    """The built-in finish tool: calling it with ``answer`` ends the rollout."""
    return ToolSpec(
        name=name,
        description="Give your final answer and end the task. Call it once, when you are done.",
        parameters={
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    )


@final
class FinishTool:
    """The finish tool as a ``Tool``; the loop reads its ``answer`` instead
    of calling it (calling it just echoes the answer)."""

    def __init__(self, name: str) -> None:
        self._spec = finish_spec(name)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.of_text(str(arguments.get("answer", "")))


#: Receives a running call's notifications: ``(call, kind, payload)``.
CallProgress = Callable[[ToolCall, str, Mapping[str, Any]], Awaitable[None]]


@final
class _CallNotifications:
    """A running call's notifications: to ``progress`` with the call, then
    to ``notify``.  (An object, not a closure: docs/design/performance.md.)"""

    __slots__ = ("_call", "_notify", "_progress")

    def __init__(
        self, call: ToolCall, notify: NotificationSink | None, progress: CallProgress
    ) -> None:
        self._call = call
        self._notify = notify
        self._progress = progress

    async def __call__(self, kind: str, payload: Mapping[str, Any]) -> None:
        await self._progress(self._call, kind, payload)
        if self._notify is not None:
            await self._notify(kind, payload)


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A call whose arguments parsed and passed the schema (or, for a tool
    that validates its own arguments, are to be validated by its call)."""

    call: ToolCall
    tool: Tool
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallsOutcome:
    """What one assistant message's tool calls produced."""

    results: tuple[ToolResult, ...]
    """In call order (a tuple: the step record keeps it as it is)."""
    answer: str | None = None
    """Set when the finish tool was called with valid arguments."""
    budget_exceeded: str | None = None
    """A tool hit the shared budget: why."""
    crashed: Sequence[ToolResult] = ()
    """The results of calls that raised an unexpected exception (a bug in
    the tool), for the loop to report beyond the model."""


@dataclass(slots=True)
class _Batch:
    """What the concurrent calls of one message write into."""

    results: list[ToolResult | None]
    # Made on first use: most messages' calls neither hit the budget nor crash.
    budget: list[str] | None = None
    crashed: list[ToolResult] | None = None


@final
class Toolbox:
    """An agent's tools in a ``ToolRegistry`` (names checked, schemas
    compiled once, specs sorted), plus the optional finish tool."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        finish_tool: str | None = None,
        where: str = "agent",
    ) -> None:
        registry = ToolRegistry()
        try:
            for tool in tools:
                registry.register(tool)
            if finish_tool is not None:
                registry.register(FinishTool(finish_tool))
        except ConfigError as exc:
            raise ConfigError(str(exc), where=f"{where}.tools") from exc
        self.registry = registry
        self.finish_tool = finish_tool
        self.specs: list[ToolSpec] = registry.specs()
        self.names: list[str] = registry.names()
        #: The deadlines of this agent's tool calls and, where the backend
        #: keeps none, of its model calls (``TaskDeadlines``).
        self.deadlines = TaskDeadlines()

    def __len__(self) -> int:
        return len(self.specs)

    # -- checking one call ----------------------------------------------------

    def prepare(self, call: ToolCall) -> PreparedCall | ToolResult:
        """Parse and validate a call; an error result says what is wrong
        (an unknown tool with the closest name, malformed argument JSON, or
        the schema's per-argument problems), never a call with made-up
        arguments.  A tool that validates its own arguments (a function
        tool) is left to do so when called: each call is validated once."""
        name = call.function.name
        entry = self.registry.entry(name)
        if entry is None:
            return self._error(call, self._unknown(name))
        raw = call.function.arguments
        try:
            # An empty argument string means "no arguments"; the schema then
            # decides whether that is enough.  msgspec first (several times
            # faster); the standard library for what msgspec refuses (``NaN``,
            # integers past 64 bits) and for its error messages.
            arguments: Any = {}
            if raw.strip():
                try:
                    arguments = msgspec.json.decode(raw)
                except msgspec.DecodeError:
                    arguments = json.loads(raw)
        except json.JSONDecodeError as exc:
            return self._error(
                call,
                f"arguments for tool '{name}' are not valid JSON: {exc.msg} at char {exc.pos}. "
                "Call the tool again with a valid JSON object.",
            )
        if entry.validator is not None and (problems := entry.validator.problems(arguments)):
            return self._error(call, invalid_arguments(name, problems).text)
        return PreparedCall(call=call, tool=entry.tool, arguments=arguments)

    def _unknown(self, name: str) -> str:
        text = f"unknown tool '{name}'; available tools: {', '.join(self.names) or '(none)'}"
        close = difflib.get_close_matches(name, self.names, n=1)
        if close:
            text += f" (did you mean '{close[0]}'?)"
        return text

    @staticmethod
    def _error(call: ToolCall, text: str, duration: float = 0.0) -> ToolResult:
        return ToolResult(
            call_id=call.id,
            name=call.function.name,
            content=f"error: {text}",
            is_error=True,
            duration_s=duration,
        )

    # -- running one message's calls ---------------------------------------

    async def run_calls(
        self,
        calls: Sequence[ToolCall],
        *,
        run_id: str,
        rollout_id: str,
        timeout_s: float,
        notify: NotificationSink | None = None,
        progress: CallProgress | None = None,
        step: int | None = None,
    ) -> CallsOutcome:
        """Run ``calls`` concurrently (several: in a task group; one: awaited
        here), each under ``timeout_s``; results in call order.  A tool's
        progress and log notifications go to ``progress`` with the call they
        belong to (and to ``notify``, when given).

        Every failure is an error result the model can act on: a bad call
        (``prepare``), a ``ToolError`` or error output, a timeout, an
        unexpected exception (logged with its traceback), and
        ``BudgetExceeded`` from a tool (flagged in the outcome so the loop
        ends the rollout as exhausted).  Cancellation is not caught:
        cancelling the caller cancels every running call.  ``step``: the
        caller's step, which names each call's ``idempotency_key``."""
        batch = _Batch([None] * len(calls))
        answer: str | None = None
        runnable: list[tuple[int, PreparedCall]] = []
        for index, call in enumerate(calls):
            prepared = self.prepare(call)
            if isinstance(prepared, ToolResult):
                batch.results[index] = prepared
            elif isinstance(prepared.tool, FinishTool):
                answer = str(prepared.arguments.get("answer", ""))
                batch.results[index] = ToolResult(
                    call_id=call.id, name=call.function.name, content=answer
                )
            else:
                runnable.append((index, prepared))
        if runnable and not runnable[1:]:
            # The common case: no task (and task group) for a single call.
            index, prepared = runnable[0]
            call = prepared.call
            context = ToolContext(
                run_id=run_id,
                rollout_id=rollout_id,
                call_id=call.id,
                idempotency_key="" if step is None else f"{rollout_id}/{step}/{call.id}",
                timeout_s=timeout_s,
                notify=notify if progress is None else _CallNotifications(call, notify, progress),
            )
            result = await self._invoke(prepared, context, batch)
            if not calls[1:]:  # the message's only call
                return CallsOutcome(
                    results=(result,),
                    budget_exceeded=batch.budget[0] if batch.budget else None,
                    crashed=batch.crashed or (),
                )
            batch.results[index] = result
        elif runnable:
            async with anyio.create_task_group() as tg:
                for index, prepared in runnable:
                    call = prepared.call
                    context = ToolContext(
                        run_id=run_id,
                        rollout_id=rollout_id,
                        call_id=call.id,
                        idempotency_key=("" if step is None else f"{rollout_id}/{step}/{call.id}"),
                        timeout_s=timeout_s,
                        notify=(
                            notify
                            if progress is None
                            else _CallNotifications(call, notify, progress)
                        ),
                    )
                    tg.start_soon(
                        self._run_one,
                        prepared,
                        context,
                        batch,
                        index,
                        name=f"tool {call.function.name} ({call.id})",
                    )
        done = tuple([r for r in batch.results if r is not None])
        assert len(done) == len(calls), "every call has a result once the group exits"
        return CallsOutcome(
            results=done,
            answer=answer,
            budget_exceeded=batch.budget[0] if batch.budget else None,
            crashed=batch.crashed or (),
        )

    async def _run_one(
        self, prepared: PreparedCall, context: ToolContext, batch: _Batch, index: int
    ) -> None:
        batch.results[index] = await self._invoke(prepared, context, batch)

    async def _invoke(
        self, prepared: PreparedCall, context: ToolContext, batch: _Batch
    ) -> ToolResult:
        call, tool = prepared.call, prepared.tool
        name = call.function.name
        timeout = context.timeout_s
        started = time.perf_counter()
        # This await's deadline (``TaskDeadlines``, a shared timer); a cancellation
        # from outside (the caller, the run's cap) goes on as one.
        deadlines = self.deadlines
        task = current_task()
        armed: Armed = None
        try:
            if isinstance(tool, ApprovalGate):
                # Waiting for the person is not the tool's work: the approval's
                # own ``timeout_s`` bounds it, and the tool's deadline starts after.
                asked = await tool.ask_approval(prepared.arguments, context)
                started = time.perf_counter()
                armed = deadlines.arm(task, timeout)
                output = await tool.call_approved(asked, prepared.arguments, context)
            else:
                armed = deadlines.arm(task, timeout)
                output = await tool.call(prepared.arguments, context)
            text, is_error, for_user = output.text, output.is_error, output.user_text
            approval = output.approval
        except asyncio.CancelledError:
            if not await deadlines.expired(task, armed):
                raise
            return self._error(
                call, f"tool '{name}' timed out after {timeout:g} s", _since(started)
            )
        except ToolError as exc:
            return self._error(call, f"tool '{name}' failed: {exc}", _since(started))
        except BudgetExceeded as exc:
            if batch.budget is None:
                batch.budget = []
            batch.budget.append(str(exc))
            return self._error(
                call, f"tool '{name}' stopped: the budget is spent ({exc})", _since(started)
            )
        except Exception as exc:
            # The tool's bug, not the loop's (a raise, or a reply that is
            # not a ToolOutput): the model hears about it, the log keeps
            # the traceback.
            log.warning(
                "tool_crashed",
                tool=name,
                call_id=call.id,
                rollout=context.rollout_id,
                exc_info=exc,
            )
            result = self._error(
                call, f"tool '{name}' failed: {type(exc).__name__}: {exc}", _since(started)
            )
            if batch.crashed is None:
                batch.crashed = []
            batch.crashed.append(result)
            return result
        finally:
            deadlines.disarm(task, armed)
        if is_error and not text.startswith("error"):
            text = f"error: {text}"
        return ToolResult(
            call_id=call.id,
            name=name,
            content=text,
            is_error=is_error,
            duration_s=time.perf_counter() - started,
            for_user=for_user,
            approval=approval,
        )


def _since(started: float) -> float:
    return time.perf_counter() - started


__all__ = ["CallsOutcome", "FinishTool", "PreparedCall", "Toolbox", "finish_spec"]
