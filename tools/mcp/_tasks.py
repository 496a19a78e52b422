"""Task-augmented tool calls (MCP tasks, protocol 2025-11-25): the call
creates a task on the server, which is polled (``tasks/get``) until it ends
and whose result is then fetched (``tasks/result``, which also delivers
what the server queued for the client, such as an elicitation).  A task
outlives no deadline of its own and no cancellation of its caller: both
send ``tasks/cancel``.  The SDK types these requests but sends none of
them, so this module does, on the session's dispatcher.

Knows nothing of catalogs, pins or supervision.  Must not import agents or
aggregators.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import Dispatcher
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import ValidationError

from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink, ToolOutput
from agentrt.tools.mcp._content import tool_output
from agentrt.tools.mcp._mcp_config import TaskPolicy
from agentrt.tools.mcp._server_requests import Caller, ServerRequestHandler

__all__ = ["CALL_FAILURES", "PendingTask", "SessionTasks", "TaskCall", "TaskFailed", "task_key"]

_log = get_logger(__name__)

_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
#: What a call to a server raises when it fails (an error answer, a broken or
#: closed session, a deadline, an answer that does not parse).
CALL_FAILURES: Final = (
    MCPError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    TimeoutError,
    ValidationError,
)


class TaskFailed(Exception):
    """The task ended without a result (cancelled, or its deadline passed)."""


class TaskCall:
    """One task-augmented ``tools/call`` on an open session.

    ``on_created`` gets the task id once the server made the task (the
    connection uses it to cancel the tasks of a run that ended);
    ``on_status`` every status seen while polling."""

    def __init__(
        self,
        session: ClientSession,
        dispatcher: Dispatcher[Any],
        policy: TaskPolicy,
        *,
        request_timeout_s: float,
        on_created: Callable[[str], None] | None = None,
        on_status: Callable[[types.GetTaskResult], Awaitable[None]] | None = None,
    ) -> None:
        self._session = session
        self._dispatcher = dispatcher
        self._policy = policy
        self._request_timeout_s = request_timeout_s
        self._on_created = on_created
        self._on_status = on_status
        self.task_id: str | None = None
        """The server's id for the task, once created."""

    async def run(
        self, tool: str, arguments: dict[str, Any], *, deadline_s: float
    ) -> types.CallToolResult:
        """Create the task, wait for it (at most ``deadline_s``) and return
        its result.  Raises ``TaskFailed`` for a task cancelled or past its
        deadline (it is cancelled on the server then), ``MCPError`` for a
        refusal, ``TimeoutError`` when one request gets no answer."""
        deadline = min(deadline_s, self._policy.deadline_s)
        ends = anyio.current_time() + deadline
        raw = await self._dispatcher.send_raw_request(
            "tools/call",
            {"name": tool, "arguments": arguments, "task": {"ttl": int(deadline * 1000)}},
            {"timeout": self._request_timeout_s, "headers": self._headers()},
        )
        if "task" not in raw:  # a server may run an optional-task call at once
            return types.CallToolResult.model_validate(raw, by_name=False)
        created = types.CreateTaskResult.model_validate(raw, by_name=False)
        self.task_id = task_id = created.task.task_id
        if self._on_created is not None:
            self._on_created(task_id)
        finished = False
        try:
            with anyio.fail_after(max(0.0, ends - anyio.current_time())):
                status = await self._poll(task_id, created.task.poll_interval)
                if status == "cancelled":
                    finished = True
                    raise TaskFailed(f"the server cancelled task {task_id}")
                result = await self._session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=task_id)
                    ),
                    types.CallToolResult,
                    request_read_timeout_seconds=max(0.1, ends - anyio.current_time()),
                )
                finished = True
                return result
        except TimeoutError:
            raise TaskFailed(
                f"task {task_id} did not finish within its deadline of {deadline:g} s; "
                "it was cancelled"
            ) from None
        finally:
            if not finished:
                await self.cancel()

    async def _poll(self, task_id: str, interval_ms: int | None) -> str:
        """Poll until the task ends or needs input; returns its status."""
        while True:
            status = await self._session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                types.GetTaskResult,
                request_read_timeout_seconds=self._request_timeout_s,
            )
            if self._on_status is not None:
                await self._on_status(status)
            # input_required: tasks/result delivers the server's queued request.
            if status.status in _TERMINAL or status.status == "input_required":
                return status.status
            every = status.poll_interval or interval_ms
            await anyio.sleep(every / 1000 if every else self._policy.poll_interval_s)

    async def cancel(self) -> None:
        """Ask the server to cancel the task (shielded: also while the
        caller is being cancelled); a failure is logged."""
        if self.task_id is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._request_timeout_s):
            try:
                await self._session.send_request(
                    types.CancelTaskRequest(
                        params=types.CancelTaskRequestParams(task_id=self.task_id)
                    ),
                    types.CancelTaskResult,
                    request_read_timeout_seconds=self._request_timeout_s,
                )
            except (
                MCPError,
                ValidationError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ) as exc:
                _log.info("mcp.task.cancel_failed", task=self.task_id, error=repr(exc))
                return
            _log.info("mcp.task.cancelled", task=self.task_id)

    def _headers(self) -> dict[str, str]:
        version = self._session.protocol_version
        return {MCP_PROTOCOL_VERSION_HEADER: version} if version else {}


def task_key(run_id: str, tool: str, arguments: Mapping[str, Any]) -> tuple[str, str, str]:
    """What makes a repeated call the same task: the run, the tool, the
    arguments (canonical JSON)."""
    return run_id, tool, json.dumps(arguments, sort_keys=True, default=str)


@dataclass(eq=False)
class PendingTask:
    """A task a run started, running in the connection's session (not in
    its caller: a caller that stops waiting leaves it running, and a call
    of the same tool with the same arguments by the same run picks it up)."""

    key: tuple[str, str, str]
    caller: Caller
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    call: TaskCall | None = None
    result: types.CallToolResult | None = None
    error: str | None = None
    status: str = "working"
    """The last status polled."""
    run_ended: bool = False
    """Cancelled because its run ended (``SessionTasks.cancel_run``)."""


#: A task call answers its caller this long before the caller's deadline.
_MARGIN_S: Final = 1.0


@final
class SessionTasks:
    """The tasks runs started on one open session.  Each runs in the
    session's task group; ``call`` waits for one until shortly before its
    caller's deadline and otherwise says it is still running (the same call
    again rejoins it).  ``failure`` words an exception for the model."""

    def __init__(
        self,
        session: ClientSession,
        dispatcher: Dispatcher[Any],
        policy: TaskPolicy,
        *,
        server: str,
        request_timeout_s: float,
        tg: anyio.abc.TaskGroup,
        requests: ServerRequestHandler,
        sink: NotificationSink,
        failure: Callable[[Exception, str, float], str],
    ) -> None:
        self._session = session
        self._dispatcher = dispatcher
        self._policy = policy
        self._server = server
        self._request_timeout_s = request_timeout_s
        self._tg = tg
        self._requests = requests
        self._sink = sink
        self._failure = failure
        self._pending: dict[tuple[str, str, str], PendingTask] = {}

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        caller: Caller,
        shown: str,
        timeout_s: float | None,
    ) -> ToolOutput:
        """Start (or rejoin) the run's task for this call and wait for it."""
        key = task_key(caller.run_id, tool, arguments)
        pending = self._pending.get(key)
        if pending is None:
            pending = PendingTask(key=key, caller=caller)
            self._pending[key] = pending
            self._tg.start_soon(self._run, pending, tool, dict(arguments), shown)
        deadline = self._policy.deadline_s
        wait = deadline if timeout_s is None else timeout_s - _MARGIN_S
        with anyio.move_on_after(max(wait, 0.0)):
            await pending.done.wait()
        where = f"MCP tool {shown!r} (server {self._server!r})"
        if not pending.done.is_set():
            task = pending.call.task_id if pending.call is not None else None
            return ToolOutput.of_text(
                f"{where} is still running as task {task} (status {pending.status}); it goes on "
                f"for up to {deadline:g} s: call the tool again with the same arguments for "
                "its result",
                is_error=True,
            )
        if self._pending.get(key) is pending:
            del self._pending[key]
        if pending.result is None:
            return ToolOutput.of_text(pending.error or f"{where}: no result", is_error=True)
        return tool_output(pending.result)

    async def _run(
        self, pending: PendingTask, tool: str, arguments: dict[str, Any], shown: str
    ) -> None:
        where = f"MCP tool {shown!r} (server {self._server!r})"

        async def on_status(status: types.GetTaskResult) -> None:
            pending.status = status.status
            note = f": {status.status_message}" if status.status_message else ""
            await self._sink(
                "log",
                {
                    "server": self._server,
                    "level": "info",
                    "logger": "agentrt.mcp.tasks",
                    "data": f"{shown}: task {status.task_id} {status.status}{note}",
                },
            )

        call = TaskCall(
            self._session,
            self._dispatcher,
            self._policy,
            request_timeout_s=self._request_timeout_s,
            on_created=lambda task_id: self._requests.task_started(task_id, pending.caller),
            on_status=on_status,
        )
        pending.call = call
        with pending.scope:
            try:
                pending.result = await call.run(tool, arguments, deadline_s=self._policy.deadline_s)
            except TaskFailed as exc:
                pending.error = f"{where}: {exc}"
            except CALL_FAILURES as exc:
                pending.error = self._failure(exc, shown, self._policy.deadline_s)
            finally:
                if call.task_id is not None:
                    self._requests.task_ended(call.task_id)
                if pending.result is None and pending.error is None:
                    pending.error = (
                        f"{where}: its task was cancelled (its run ended)"
                        if pending.run_ended
                        else f"{where}: the connection to the server ended during its task"
                    )
                pending.done.set()

    def cancel_run(self, run_id: str) -> int:
        """Cancel the tasks of ``run_id`` still running; returns how many."""
        mine = [p for p in self._pending.values() if p.caller.run_id == run_id]
        for pending in mine:
            del self._pending[pending.key]
            pending.run_ended = True
            pending.scope.cancel()
        return len(mine)
