"""MCP servers as actors of an actor system, and their tools for agents:
``spawn_mcp_servers``, ``McpServers``, the caller's side of each actor
(``McpServerHandle``: tools, calls with deadlines, progress relayed to the
caller's ``ToolContext.notify``) and ``McpToolSource``, what an agent's MCP
bindings read.

Must not import agents or aggregators.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, final

import anyio

from agentrt.runtime.kernel._actor_errors import ActorCrashed, ActorStopped, AskTimeout
from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.kernel._ref import ActorRef
from agentrt.runtime.kernel._supervisor_ref import SupervisorRef
from agentrt.runtime.kernel._system import ActorSystem, SystemState
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink, ToolContext, ToolOutput
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._mcp_tool import McpTool
from agentrt.tools.mcp._pinning import MemoryPinStore, PinDecision, PinStore
from agentrt.tools.mcp._rollouts import start_deadline_s
from agentrt.tools.mcp._server_actor import (
    ROUTE_KEY,
    CallTool,
    CancelRunTasks,
    EndRollout,
    GetPrompt,
    GetStatus,
    ListTools,
    McpPrompt,
    McpServerActor,
    McpServerReply,
    McpServerRequest,
    McpServerStatus,
    McpToolList,
    ReadAttached,
    Reconnect,
    SetRolloutRoots,
    SetRoots,
)
from agentrt.tools.mcp._server_requests import McpClientHooks

__all__ = [
    "McpServerHandle",
    "McpServerTools",
    "McpServers",
    "McpToolSource",
    "spawn_mcp_servers",
]

_log = get_logger(__name__)

_ReplyT = TypeVar("_ReplyT", McpToolList, McpServerStatus, ToolOutput, McpPrompt)

#: Past the server's own deadline for a call (which already has a guard of
#: its own), how long the caller waits for the actor before giving up on it.
_ASK_SLACK_S: Final = 10.0
#: Seconds, beyond connecting and listing, before a start counts as hung.
_SPAWN_SLACK_S: Final = 10.0


class McpServerTools(Protocol):
    """One server's tools as an agent binding reads them, and its resources
    as an agent's context attaches them."""

    def tools(self) -> Sequence[McpTool]:
        """The tools offered, sorted by namespaced name."""
        ...

    async def attached(self, uri: str) -> str:
        """Resource ``uri``'s text as last read, kept current (``McpServerHandle.attached``)."""
        ...

    async def prompt(
        self, name: str, arguments: Mapping[str, str], *, complete: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """Prompt ``name``'s messages (``McpServerHandle.prompt``)."""
        ...


class McpToolSource(Protocol):
    """Open MCP servers by name (``McpServers``); a server
    that could not be started is absent."""

    @property
    def connections(self) -> Mapping[str, McpServerTools]: ...


@final
class _Progress:
    """Per-call progress sinks of one server's callers, by route; everything
    else goes on to the server-wide sink."""

    def __init__(self, server: str, sink: NotificationSink | None) -> None:
        self._sink = sink
        self._calls: dict[str, NotificationSink] = {}
        self._ids = itertools.count(1)
        self._server = server

    def open(self, notify: NotificationSink) -> str:
        route = f"{self._server}#{next(self._ids)}"
        self._calls[route] = notify
        return route

    def close(self, route: str) -> None:
        self._calls.pop(route, None)

    async def dispatch(self, kind: str, payload: Mapping[str, Any]) -> None:
        route = payload.get(ROUTE_KEY)
        if route is None:
            if self._sink is not None:
                await self._sink(kind, payload)
            return
        notify = self._calls.get(route)
        if notify is not None:
            await notify(kind, {k: v for k, v in payload.items() if k != ROUTE_KEY})


@final
class McpServerHandle:
    """The caller's side of one :class:`McpServerActor`: its tools (as of
    the last listing), calls, status and reconnection.  Satisfies
    ``McpToolCaller`` (what an ``McpTool`` calls) and ``McpServerTools``."""

    def __init__(
        self,
        config: StdioServerConfig | HttpServerConfig,
        ref: ActorRef[McpServerRequest, McpServerReply],
        *,
        system: ActorSystem,
        progress: _Progress,
    ) -> None:
        self.config = config
        self.ref = ref
        self._system = system
        self._progress = progress
        self._tools: list[McpTool] = []
        self._blocked: list[PinDecision] = []

    @property
    def name(self) -> str:
        return self.config.name

    def tools(self) -> list[McpTool]:
        """The tools offered at the last listing (``refresh``), sorted by
        namespaced name.  They stay valid across restarts: a call to a tool
        the server no longer offers answers with an error output."""
        return list(self._tools)

    def blocked(self) -> list[PinDecision]:
        """Tools withheld at the last listing because their definition does
        not match its pin."""
        return list(self._blocked)

    async def refresh(self) -> list[McpTool]:
        """List the server's tools again; returns them (see ``tools``).
        Raises ``McpServerError`` when the actor does not answer."""
        listing = await self._ask(ListTools(), McpToolList)
        self._tools = sorted(
            (
                McpTool(self, remote_name=t.remote_name, spec=t.spec, digest=t.digest)
                for t in listing.tools
            ),
            key=lambda t: t.spec.name,
        )
        self._blocked = list(listing.blocked)
        return self.tools()

    async def attached(self, uri: str) -> str:
        """Resource ``uri`` as an agent's context shows it: text (clipped at
        ``resources.max_chars``), binary contents named.  Read and subscribed
        to on first use, read again whenever the server says it changed.
        Raises ``McpServerError`` when it cannot be read."""
        deadline = self.config.connect_timeout_s + self.config.request_timeout_s
        reply = await self._ask(ReadAttached(uri), ToolOutput, timeout_s=deadline, errors=True)
        return reply.text

    async def prompt(
        self, name: str, arguments: Mapping[str, str], *, complete: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """Prompt ``name`` of the server, filled in with ``arguments``: its
        messages as (role, text) pairs.  Each argument named in ``complete``
        first takes the server's first completion of its given value
        (``completion/complete``).  Raises ``McpServerError`` when the server
        has no such prompt, no completion, or does not answer."""
        deadline = self.config.connect_timeout_s + 2 * self.config.request_timeout_s
        request = GetPrompt(name=name, arguments=dict(arguments), complete=tuple(complete))
        reply = await self._ask(request, McpPrompt, timeout_s=deadline, errors=True)
        return list(reply.messages)

    async def status(self) -> McpServerStatus:
        """The connection's state; ``McpServerError`` when the actor does not answer."""
        return await self._ask(GetStatus(), McpServerStatus)

    async def reconnect(self) -> McpServerStatus:
        """Replace the connection now (a failed server tries again); returns
        at once, before it is connected."""
        return await self._ask(Reconnect(), McpServerStatus)

    async def cancel_run(self, run_id: str) -> None:
        """Cancel the tasks ``run_id`` started on this server that still run."""
        await self._ask(CancelRunTasks(run_id), McpServerStatus)

    async def set_roots(self, owner: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` to the shared connection as roots for ``owner``
        (empty: withdraw them): every run's calls see them."""
        await self._ask(SetRoots(owner, tuple(str(p) for p in paths)), McpServerStatus)

    async def set_rollout_roots(self, run_id: str, rollout_id: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` to ``rollout_id``'s own connection besides its
        workspace (empty: withdraw them); its server hears
        ``roots/list_changed``.  ``McpServerError`` for a server without
        ``per_rollout`` (a shared connection would show them to every run)."""
        if not self.config.per_rollout:
            raise McpServerError(
                self.name,
                "offers no roots per rollout (per_rollout is false: its one connection is "
                "shared by every run)",
            )
        message = SetRolloutRoots(run_id, rollout_id, tuple(str(p) for p in paths))
        await self._ask(message, McpServerStatus)

    async def end_rollout(self, run_id: str, rollout_id: str) -> None:
        """``rollout_id`` ended: close its own connection (``per_rollout``)."""
        if self.config.per_rollout:
            await self._ask(EndRollout(run_id, rollout_id), McpServerStatus)

    async def stop(self) -> None:
        """Stop the actor and its connection for good (nothing to do once
        the actor system is closed: that stopped them)."""
        if self._system.state is SystemState.OPENED:
            await self._system.stop(self.ref)

    async def call_tool(
        self,
        remote_name: str,
        arguments: Mapping[str, Any],
        *,
        context: ToolContext | None = None,
        display_name: str | None = None,
    ) -> ToolOutput:
        """Call a tool by the server's own name through the actor.  Every
        failure (the server restarting or down, a deadline, the actor
        crashed or stopped) is an error output naming the tool and server."""
        context = context or ToolContext()
        shown = display_name or remote_name
        route = self._progress.open(context.notify) if context.notify is not None else ""
        deadline = min(self.config.call_timeout_s, context.timeout_s or math.inf)
        if self.config.per_rollout and context.rollout_id:
            deadline += start_deadline_s(self.config)  # the rollout's first call starts its own
        message = CallTool(
            tool=remote_name,
            arguments=dict(arguments),
            display_name=shown,
            run_id=context.run_id,
            rollout_id=context.rollout_id,
            call_id=context.call_id,
            idempotency_key=context.idempotency_key,
            timeout_s=context.timeout_s,
            route=route,
        )
        where = f"MCP tool {shown!r} (server {self.name!r})"
        try:
            reply = await self.ref.ask(message, timeout=deadline + _ASK_SLACK_S)
        except AskTimeout:
            text = f"{where}: its server actor gave no answer within {deadline + _ASK_SLACK_S:g} s"
        except ActorCrashed as exc:
            text = (
                f"{where}: the server's actor failed during the call ({exc.cause!r}) and is "
                "being restarted; the call may or may not have run; try again shortly"
            )
        except ActorStopped:
            text = f"{where}: the server is stopped"
        else:
            if isinstance(reply, ToolOutput):
                return reply
            text = f"{where}: its server actor answered with a {type(reply).__name__}"
        finally:
            if route:
                self._progress.close(route)
        return ToolOutput.of_text(text, is_error=True)

    async def _ask(
        self,
        message: McpServerRequest,
        expected: type[_ReplyT],
        *,
        timeout_s: float | None = None,
        errors: bool = False,
    ) -> _ReplyT:
        """Ask the actor; with ``errors``, an error output it answers with
        is raised as ``McpServerError`` (it says why)."""
        try:
            reply = await self.ref.ask(message, timeout=timeout_s or self.config.request_timeout_s)
        except (AskTimeout, ActorCrashed, ActorStopped) as exc:
            raise McpServerError(self.name, f"its actor did not answer: {exc}") from exc
        if errors and isinstance(reply, ToolOutput) and reply.is_error:
            raise McpServerError(self.name, reply.text.removeprefix(f"MCP server {self.name!r}: "))
        if not isinstance(reply, expected):
            raise McpServerError(
                self.name, f"its actor answered {type(message).__name__} with {reply!r}"
            )
        return reply

    def __repr__(self) -> str:
        return f"<McpServerHandle {self.name!r} {self.ref.address}>"


@final
class McpServers:
    """The MCP server actors :func:`spawn_mcp_servers` started, by name."""

    def __init__(
        self, handles: Mapping[str, McpServerHandle], failures: Mapping[str, AgentrtError]
    ) -> None:
        self._handles = dict(handles)
        self.failures: dict[str, AgentrtError] = dict(failures)
        """Servers that could not be started, with the reason."""
        self.per_rollout = any(h.config.per_rollout for h in self._handles.values())
        """Some server keeps a connection per rollout (``per_rollout``)."""

    @property
    def connections(self) -> Mapping[str, McpServerHandle]:
        """Servers that started, by name (``McpToolSource``)."""
        return self._handles

    def tools(self, server: str | None = None) -> list[McpTool]:
        """The tools of ``server`` (every started server's when None), sorted
        by namespaced name (a stable order keeps the prompt prefix
        byte-identical).  A server that failed to start has none; a name
        never spawned raises ``KeyError``."""
        if server is None:
            found = [t for handle in self._handles.values() for t in handle.tools()]
            return sorted(found, key=lambda t: t.spec.name)
        handle = self._handles.get(server)
        if handle is not None:
            return handle.tools()
        if server in self.failures:
            return []
        raise KeyError(
            f"no MCP server {server!r} was spawned "
            f"(spawned: {', '.join(sorted([*self._handles, *self.failures])) or 'none'})"
        )

    async def refresh(self) -> None:
        """List every started server's tools again (each actor answers at
        once, so one after the other); ``McpServerError`` for the first whose
        actor does not answer."""
        for handle in self._handles.values():
            await handle.refresh()

    async def catch_up(self) -> None:
        """List again the servers that offered no tools at their last
        listing (an optional server still connecting): what a run started
        now sees.  A server whose actor does not answer is skipped."""
        for handle in self._handles.values():
            if not handle.tools():
                try:
                    await handle.refresh()
                except McpServerError as exc:
                    _log.warning("mcp.server.refresh_failed", server=handle.name, error=str(exc))

    async def run_finished(self, run_id: str) -> None:
        """A run ended: cancel its tasks on every server (a task must not
        outlive its run) and close its rollouts' own connections
        (``per_rollout``).  Failures are logged."""
        async with anyio.create_task_group() as tg:
            for handle in self._handles.values():
                tg.start_soon(self._cancel_run, handle, run_id)

    @staticmethod
    async def _cancel_run(handle: McpServerHandle, run_id: str) -> None:
        try:
            await handle.cancel_run(run_id)
        except McpServerError as exc:
            _log.warning("mcp.server.cancel_run_failed", server=handle.name, error=str(exc))

    async def set_roots(self, owner: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` as roots for ``owner`` to every server's shared
        connection (seen by every run's calls)."""
        for handle in self._handles.values():
            await handle.set_roots(owner, paths)

    async def set_rollout_roots(self, run_id: str, rollout_id: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` besides its workspace to ``rollout_id``'s own
        connection of every ``per_rollout`` server (servers with a shared
        connection are not given them)."""
        for handle in self._handles.values():
            if handle.config.per_rollout:
                await handle.set_rollout_roots(run_id, rollout_id, paths)

    async def rollout_finished(self, run_id: str, rollout_id: str) -> None:
        """A rollout ended: close its own connections (``per_rollout``
        servers).  Failures are logged."""
        for handle in self._handles.values():
            if handle.config.per_rollout:
                try:
                    await handle.end_rollout(run_id, rollout_id)
                except McpServerError as exc:
                    _log.warning(
                        "mcp.server.end_rollout_failed", server=handle.name, error=str(exc)
                    )

    async def stop(self) -> None:
        """Stop every server actor (and its server) for good.  Shielded: a
        cancelled owner still stops its servers (each actor's stop timeout
        bounds it), and no cancellation is raised from inside its exit."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for handle in self._handles.values():
                    tg.start_soon(handle.stop)


async def spawn_mcp_servers(
    system: ActorSystem,
    servers: Sequence[StdioServerConfig | HttpServerConfig],
    *,
    parent: SupervisorRef | None = None,
    pins: PinStore | None = None,
    on_notification: NotificationSink | None = None,
    require_all: bool = False,
    hooks: McpClientHooks | None = None,
) -> McpServers:
    """Spawn one :class:`McpServerActor` per server, concurrently, and list
    each one's tools; returns once every server is connected or has failed.

    ``parent`` is the supervisor the actors live under (default: the
    system's ``/user``); each is named ``mcp:<server>``.  ``pins`` is the
    pin store shared by the servers (default: in memory).
    ``on_notification`` gets every server's ``log``, ``state`` and
    ``progress`` notifications (a call's progress also goes to its own
    ``ToolContext.notify``); ``hooks`` answer the servers' questions and
    sampling requests.  Servers start in parallel, each within its own
    deadline; an optional one (``required: false``) is not waited for: it
    connects in the background and its tools appear once it is listed
    again (``McpServers.catch_up``).  A required server that cannot start (its command is
    missing, the handshake fails, ``connect_timeout_s`` passes) is left out
    and reported in ``failures``; with ``require_all`` the first such
    failure of a required server is raised instead, after stopping the servers that did start.
    Raises ``ValueError`` for two servers with the same name."""
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"two MCP servers share a name: {names}")
    store = pins if pins is not None else MemoryPinStore()
    handles: dict[str, McpServerHandle] = {}
    failures: dict[str, AgentrtError] = {}

    async def spawn(config: StdioServerConfig | HttpServerConfig) -> None:
        progress = _Progress(config.name, on_notification)
        within = config.connect_timeout_s + config.request_timeout_s + _SPAWN_SLACK_S
        if isinstance(config, HttpServerConfig):
            within += config.authorization_wait_s()  # a person approving OAuth access
        try:
            with anyio.fail_after(within):
                ref: ActorRef[McpServerRequest, McpServerReply] = await system.spawn(
                    lambda: McpServerActor(
                        config,
                        pins=store,
                        on_notification=progress.dispatch,
                        hooks=hooks,
                        wait=config.required,
                    ),
                    name=f"mcp:{config.name}",
                    parent=parent,
                )
            handle = McpServerHandle(config, ref, system=system, progress=progress)
            try:
                await handle.refresh()
            except McpServerError:
                await handle.stop()
                raise
        except ActorCrashed as exc:
            cause = exc.cause
            failures[config.name] = (
                cause
                if isinstance(cause, AgentrtError)
                else McpServerError(config.name, f"could not start: {cause!r}")
            )
        except TimeoutError:
            failures[config.name] = McpServerError(
                config.name, f"did not start within {within:g} s"
            )
        except McpServerError as exc:
            failures[config.name] = exc
        else:
            handles[config.name] = handle
            return
        _log.error("mcp.server.not_started", server=config.name, error=str(failures[config.name]))

    async with anyio.create_task_group() as tg:
        for config in servers:
            # Concurrently: one slow npx download must not hold up the rest.
            tg.start_soon(spawn, config)
    started = McpServers({n: handles[n] for n in names if n in handles}, failures)
    required = [
        n for n in names if n in failures and next(s for s in servers if s.name == n).required
    ]
    if require_all and required:
        await started.stop()
        raise failures[required[0]]
    return started
