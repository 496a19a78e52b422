"""``McpServerActor``: one MCP server connection as a supervised actor, and the
tagged request and reply types it answers.

Requests are plain data, so the actor's placement is a configuration
choice.  Must not import agents or aggregators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

import anyio
import msgspec
from anyio.abc import TaskStatus

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._actor import Actor
from agentrt.runtime.kernel._deferred import Deferred
from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink, ToolContext, ToolOutput
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._pinning import PinDecision, PinStore
from agentrt.tools.mcp._rollouts import RolloutConnections
from agentrt.tools.mcp._server_health import ConnectionState
from agentrt.tools.mcp._server_requests import McpClientHooks

__all__ = [
    "ROUTE_KEY",
    "CallTool",
    "CancelRunTasks",
    "EndRollout",
    "GetPrompt",
    "GetStatus",
    "ListTools",
    "McpPrompt",
    "McpServerActor",
    "McpServerReply",
    "McpServerRequest",
    "McpServerStatus",
    "McpToolInfo",
    "McpToolList",
    "ReadAttached",
    "Reconnect",
    "SetRolloutRoots",
    "SetRoots",
]

_log = get_logger(__name__)

#: The payload key that carries a call's route in progress notifications.
ROUTE_KEY: Final = "route"


class ListTools(msgspec.Struct, tag=True, frozen=True):
    """The tools the server offers now."""


class CallTool(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Call one tool by the server's own name."""

    tool: str
    arguments: dict[str, Any]
    #: The namespaced name, for messages (``<server>__<tool>``).
    display_name: str = ""
    run_id: str = ""
    rollout_id: str = ""
    call_id: str = ""
    idempotency_key: str = ""
    #: The caller's deadline; the server's ``call_timeout_s`` caps it.
    timeout_s: float | None = None
    #: Non-empty: progress notifications carry it under ``ROUTE_KEY``.
    route: str = ""


class GetStatus(msgspec.Struct, tag=True, frozen=True):
    """Report the connection's state."""


class Reconnect(msgspec.Struct, tag=True, frozen=True):
    """Replace the connection now."""


class CancelRunTasks(msgspec.Struct, tag=True, frozen=True):
    """A run ended: cancel the tasks it started that still run, and close
    its rollouts' connections (``per_rollout``)."""

    run_id: str


class EndRollout(msgspec.Struct, tag=True, frozen=True):
    """A rollout ended: close its connection (``per_rollout``)."""

    run_id: str
    rollout_id: str


class ReadAttached(msgspec.Struct, tag=True, frozen=True):
    """The text of resource ``uri`` as an agent's context shows it, kept
    current by subscription (``McpConnection.attached``)."""

    uri: str


class GetPrompt(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Prompt ``name``'s messages (``McpConnection.prompt``)."""

    name: str
    arguments: dict[str, str]
    complete: tuple[str, ...] = ()


class SetRoots(msgspec.Struct, tag=True, frozen=True):
    """Offer ``paths`` as roots for ``owner`` on the shared connection
    (every run's calls go there; empty: withdraw them)."""

    owner: str
    paths: tuple[str, ...]


class SetRolloutRoots(msgspec.Struct, tag=True, frozen=True):
    """Offer ``paths`` to one rollout's own connection besides its
    workspace (``per_rollout``; empty: withdraw them)."""

    run_id: str
    rollout_id: str
    paths: tuple[str, ...]


McpServerRequest = (
    ListTools
    | CallTool
    | GetStatus
    | Reconnect
    | CancelRunTasks
    | EndRollout
    | SetRoots
    | SetRolloutRoots
    | ReadAttached
    | GetPrompt
)


class McpToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One offered tool, as data (the caller builds an ``McpTool`` from it)."""

    remote_name: str
    spec: ToolSpec
    digest: str


class McpToolList(msgspec.Struct, frozen=True, kw_only=True):
    """The reply to ``ListTools``."""

    server: str
    tools: tuple[McpToolInfo, ...]
    blocked: tuple[PinDecision, ...]


class McpServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The reply to ``GetStatus`` and ``Reconnect``."""

    server: str
    state: ConnectionState
    #: Why it is not ready (empty when it is).
    reason: str
    #: Times the connection restarted the server (this connection only).
    restarts: int
    #: Times the actor itself was restarted (a bug in it, not a server death).
    actor_restarts: int
    tools: int
    #: Connections of their own open (or starting) for rollouts (``per_rollout``).
    rollouts: int = 0


class McpPrompt(msgspec.Struct, frozen=True, kw_only=True):
    """The reply to ``GetPrompt``: its messages as (role, text) pairs."""

    messages: tuple[tuple[str, str], ...]


McpServerReply = McpToolList | ToolOutput | McpServerStatus | McpPrompt


@final
class McpServerActor(Actor[McpServerRequest, McpServerReply]):
    """Owns one connection to ``config``'s server, held open by a service,
    and answers ``ListTools``, ``CallTool`` (from a service, so calls from
    many runs overlap), ``GetStatus`` and ``Reconnect`` (replace the
    connection now, cutting a restart delay short).  A dead server is
    restarted by the connection; once its restart policy gives up it is
    ``failed`` until ``Reconnect``, and the actor stays up to say so.  The
    supervisor restarts the actor only for a bug in it.

    ``pins`` is the pin store its tool definitions are checked against;
    ``on_notification`` gets the connection's ``progress``, ``log`` and
    ``state`` notifications (``progress`` twice for a call with a route:
    once with ``ROUTE_KEY``, once without).  ``hooks`` answer the
    server's questions and sampling requests; without ``wait`` the actor
    starts at once and connects in the background (an optional server).

    With ``config.per_rollout`` a call that names a rollout goes to that
    rollout's own connection (``RolloutConnections``), started on its first
    call; the shared one lists the tools and serves calls of no rollout."""

    __slots__ = (
        "_config",
        "_connected",
        "_connection",
        "_down",
        "_hold_scope",
        "_hooks",
        "_pins",
        "_rollouts",
        "_sink",
        "_wait",
    )

    def __init__(
        self,
        config: StdioServerConfig | HttpServerConfig,
        *,
        pins: PinStore,
        on_notification: NotificationSink | None = None,
        hooks: McpClientHooks | None = None,
        wait: bool = True,
    ) -> None:
        self._config = config
        self._pins = pins
        self._sink = on_notification
        self._hooks = hooks
        self._wait = wait
        self._connection: McpConnection | None = None
        #: Why there is no connection: the last start failed.
        self._down: str | None = None
        self._hold_scope: anyio.CancelScope | None = None
        self._rollouts: RolloutConnections | None = None
        #: Set once the connection is open or its start failed (calls wait on it).
        self._connected: anyio.Event | None = None

    @property
    def name(self) -> str:
        return self._config.name

    # -- life -------------------------------------------------------------------

    async def on_started(self) -> None:
        self._connected = anyio.Event()
        self._open_rollouts()
        # Ready once connected and listed; a failed first start raises here,
        # so spawning the actor fails with the server's own error.
        if self._wait:
            await self.context.start_service(self._hold, name="connection")
        else:
            self.context.start_soon_service(self._hold_or_note, name="connection")

    async def on_restarted(self, error: Exception) -> None:
        self._connected = anyio.Event()
        self._open_rollouts()  # the old incarnation's were closed with its services
        # Must return promptly (the supervisor waits): connect in the background.
        self.context.start_soon_service(self._hold_or_note, name="connection")

    def _open_rollouts(self) -> None:
        if self._config.per_rollout:
            context = self.context
            self._rollouts = RolloutConnections(
                self._config,
                spawn=lambda hold: context.start_soon_service(hold, name="rollout-connection"),
                pins=self._pins,
                on_notification=self._sink,
                hooks=self._hooks,
            )

    async def _hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the connection, report ready, keep it open until cancelled."""
        with anyio.CancelScope() as self._hold_scope:
            connection = McpConnection(
                self._config, pins=self._pins, on_notification=self._sink, hooks=self._hooks
            )
            async with connection:
                self._connection, self._down = connection, None
                self._wake()
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    if self._connection is connection:
                        self._connection = None

    async def _hold_or_note(self) -> None:
        try:
            await self._hold()
        except AgentrtError as exc:  # stays down; calls and GetStatus say why
            self._down = exc.detail if isinstance(exc, McpServerError) else str(exc)
            self._wake()
            _log.error("mcp.server.not_started", server=self.name, error=str(exc))

    # -- requests ---------------------------------------------------------------

    async def receive(self, message: McpServerRequest) -> McpServerReply | Deferred[McpServerReply]:
        match message:
            case CallTool():
                return self.context.defer(self._call, message, name="call")
            case ReadAttached() | GetPrompt():
                return self.context.defer(self._context_of, message, name="context")
            case ListTools():
                return self._listing()
            case GetStatus():
                return self._status()
            case Reconnect():
                if self._hold_scope is not None:
                    self._hold_scope.cancel()
                self._connection, self._down = None, None
                self._connected = anyio.Event()
                self.context.start_soon_service(self._hold_or_note, name="connection")
                return msgspec.structs.replace(
                    self._status(), state=ConnectionState.CONNECTING, reason="reconnecting"
                )
            case _:
                return await self._runs_and_roots(message)

    async def _runs_and_roots(
        self, message: CancelRunTasks | EndRollout | SetRoots | SetRolloutRoots
    ) -> McpServerReply | Deferred[McpServerReply]:
        """A run or rollout ended, or roots changed."""
        rollouts = self._rollouts
        match message:
            case CancelRunTasks(run_id=run_id):
                if self._connection is not None:
                    await self._connection.cancel_run(run_id)
                if rollouts is not None:  # closing takes a moment: off the mailbox
                    return self.context.defer(self._finish, run_id, None, name="end-run")
            case EndRollout(run_id=run_id, rollout_id=rollout_id) if rollouts is not None:
                return self.context.defer(self._finish, run_id, rollout_id, name="end-rollout")
            case SetRoots(owner=owner, paths=paths) if self._connection is not None:
                await self._connection.set_roots(owner, [Path(p) for p in paths])
            case SetRolloutRoots(run_id=run_id, rollout_id=rollout_id, paths=paths):
                # Never on a shared connection: every run would see them.
                if rollouts is not None:
                    await rollouts.set_roots(run_id, rollout_id, [Path(p) for p in paths])
        return self._status()

    async def _finish(self, run_id: str, rollout_id: str | None) -> McpServerReply:
        if self._rollouts is not None:
            await self._rollouts.finish(run_id, rollout_id)
        return self._status()

    async def _call(self, message: CallTool) -> McpServerReply:
        connection = self._connection
        if self._rollouts is not None and message.rollout_id:
            try:
                connection = await self._rollouts.connection(message.run_id, message.rollout_id)
            except McpServerError as exc:
                shown = message.display_name or message.tool
                return ToolOutput.of_text(f"MCP tool {shown!r}: {exc}", is_error=True)
        timeout_s = message.timeout_s
        if connection is None and self._down is None and self._connected is not None:
            # (Re)connecting: wait for it within the call's deadline.
            started = anyio.current_time()
            timeout = min(self._config.call_timeout_s, timeout_s or math.inf)
            with anyio.move_on_after(timeout):
                await self._connected.wait()
            connection = self._connection
            timeout_s = max(0.0, timeout - (anyio.current_time() - started))
        if connection is None:
            return ToolOutput.of_text(self._unavailable(), is_error=True)
        context = ToolContext(
            run_id=message.run_id,
            rollout_id=message.rollout_id,
            call_id=message.call_id,
            idempotency_key=message.idempotency_key,
            timeout_s=timeout_s,
            notify=self._relay(message.route) if message.route else None,
        )
        return await connection.call_tool(
            message.tool,
            message.arguments,
            context=context,
            display_name=message.display_name or None,
        )

    async def _context_of(self, message: ReadAttached | GetPrompt) -> McpServerReply:
        """An attached resource's text, or a prompt's messages; failures
        are error outputs saying why."""
        connection = self._connection
        if connection is None:
            return ToolOutput.of_text(self._unavailable(), is_error=True)
        try:
            if isinstance(message, ReadAttached):
                return ToolOutput.of_text(await connection.attached(message.uri))
            got = await connection.prompt(
                message.name, message.arguments, complete=message.complete
            )
        except McpServerError as exc:
            return ToolOutput.of_text(str(exc), is_error=True)
        return McpPrompt(messages=tuple(got))

    def _relay(self, route: str) -> NotificationSink | None:
        sink = self._sink
        if sink is None:
            return None

        async def relay(kind: str, payload: Mapping[str, Any]) -> None:
            await sink(kind, {**payload, ROUTE_KEY: route})

        return relay

    def _listing(self) -> McpToolList:
        connection = self._connection
        if connection is None:
            return McpToolList(server=self.name, tools=(), blocked=())
        return McpToolList(
            server=self.name,
            tools=tuple(
                McpToolInfo(remote_name=t.remote_name, spec=t.spec, digest=t.digest)
                for t in connection.tools()
            ),
            blocked=tuple(connection.blocked()),
        )

    def _status(self) -> McpServerStatus:
        connection = self._connection
        incarnation = self.context.incarnation
        if connection is None:
            down = self._down
            return McpServerStatus(
                server=self.name,
                state=ConnectionState.FAILED if down else ConnectionState.CONNECTING,
                reason=down or "connecting",
                restarts=0,
                actor_restarts=incarnation,
                tools=0,
                rollouts=len(self._rollouts or ()),
            )
        return McpServerStatus(
            server=self.name,
            state=connection.state,
            reason=connection.reason,
            restarts=connection.restarts,
            actor_restarts=incarnation,
            tools=len(connection.tools()),
            rollouts=len(self._rollouts or ()),
        )

    def _wake(self) -> None:
        if self._connected is not None:
            self._connected.set()

    def _unavailable(self) -> str:
        if self._down is not None:
            return f"MCP server {self.name!r} is down: {self._down}"
        return f"MCP server {self.name!r} did not connect within the call's deadline"
