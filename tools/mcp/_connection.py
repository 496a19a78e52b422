"""``McpConnection``: one supervised connection to one MCP server (transport,
session, handshake, tool listing and pin checks, restarts).

Must not import agents or aggregators.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, cast, final

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import msgspec
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import ValidationError

from agentrt._version import __version__
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._backoff import RestartBackoff
from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink, ToolContent, ToolContext, ToolOutput
from agentrt.tools.mcp._auth import AuthorizationHandler, McpAuth
from agentrt.tools.mcp._catalog import (
    MAX_PAGES,
    Catalog,
    build_catalog,
    is_destructive,
    is_idempotent,
    list_all_tools,
)
from agentrt.tools.mcp._content import resource_contents, tool_output
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import (
    McpServerError,
    describe,
    leaf,
    malformed_detail,
    session_forgotten,
)
from agentrt.tools.mcp._mcp_tool import McpTool, namespaced_names
from agentrt.tools.mcp._pinning import MemoryPinStore, PinDecision, PinStore
from agentrt.tools.mcp._server_content import Request, ServerContent
from agentrt.tools.mcp._server_health import ConnectionState, Health
from agentrt.tools.mcp._server_requests import (
    Caller,
    McpClientHooks,
    ServerRequestHandler,
    approve_call,
)
from agentrt.tools.mcp._tasks import CALL_FAILURES, SessionTasks
from agentrt.tools.mcp._transport import EndWatchingStream, StderrTail, open_transport

__all__ = ["ConnectionState", "McpConnection", "McpServerError"]

_log = get_logger(__name__)

#: Extra time past the SDK's own request timeout before our guard gives up.
_GUARD_S: Final = 5.0
IDEMPOTENCY_META_KEY: Final = "io.agentrt/idempotency-key"
"""The ``_meta`` key of a tool call's idempotency key (``ToolContext``)."""


def _call_meta(context: ToolContext) -> types.RequestParamsMeta | None:
    """A tool call's ``_meta``: its idempotency key, when it has one."""
    if not context.idempotency_key:
        return None
    return cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: context.idempotency_key})


#: How much of a server's stderr an error message quotes.
_STDERR_NOTE_CHARS: Final = 600


@dataclass(eq=False)
class _Live:
    """One open session and what happened on it."""

    session: ClientSession
    ended: anyio.Event
    dispatcher: JSONRPCDispatcher[Any]
    tasks: SessionTasks
    relist: anyio.Event = field(default_factory=anyio.Event)
    malformed: str | None = None
    lost: str | None = None
    forgotten: bool = False
    """The server no longer knows the session (a call may be retried)."""
    rejected: list[int] = field(default_factory=list)
    """HTTP 400/404 answers to requests that carried the session id."""
    capabilities: types.ServerCapabilities | None = None
    """What the server said it offers in the handshake."""


@final
class McpConnection:
    """A supervised connection to one MCP server (an async context manager).

    Entering it connects, lists the tools and checks each against its pin in
    ``pins``; a first failure is raised there (``ConfigError`` for a command
    that cannot be found); its message names the server and its URL or
    command.  A line on stdout that is not JSON-RPC is logged and skipped
    (as the SDK does).  A server that dies later is restarted with backoff
    (``config.restart``): meanwhile a call waits for it within its own
    deadline, then runs (one the server stays down for answers with an
    error output saying why), and calls in flight fail with "connection
    lost".
    ``notifications/tools/list_changed`` re-lists and re-checks pins.
    ``on_notification`` gets ``(kind, payload)`` with kind ``progress``,
    ``log`` or ``state``; progress also goes to the caller's
    ``ToolContext.notify``.  ``authorize`` is shown the authorization URL
    when an OAuth server (``config.auth``) needs a person to approve; a
    request refused for want of authorization fails with
    ``McpAuthorizationError`` ("authorization required for MCP server ...")."""

    def __init__(
        self,
        config: StdioServerConfig | HttpServerConfig,
        *,
        pins: PinStore | None = None,
        on_notification: NotificationSink | None = None,
        authorize: AuthorizationHandler | None = None,
        hooks: McpClientHooks | None = None,
    ) -> None:
        self.config = config
        self._requests = ServerRequestHandler(config, hooks)
        self._authorize = authorize or (hooks.authorize if hooks is not None else None)
        self._auth: McpAuth | None = None
        self._pins = pins if pins is not None else MemoryPinStore()
        self._sink = on_notification
        self._health = Health(config.name)
        self._opened = False
        self._live: _Live | None = None
        self._catalog = Catalog()
        self._tail: StderrTail | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._forgotten = False
        """The last session ended because the server forgot it."""
        self._content = ServerContent(config, self._emit)
        self.restarts = 0
        """How many times the server was restarted."""

    # -- public surface -------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> ConnectionState:
        return self._health.state

    @property
    def reason(self) -> str:
        """Why the server is not ready (empty while it is)."""
        return "" if self._health.state is ConnectionState.READY else self._health.reason

    def tools(self) -> list[McpTool]:
        """The tools offered now (blocked ones left out), sorted by name."""
        return sorted(self._catalog.tools.values(), key=lambda t: t.spec.name)

    def blocked(self) -> list[PinDecision]:
        """Tools withheld because their definition does not match its pin."""
        return sorted(self._catalog.blocked.values(), key=lambda d: d.tool)

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until the server is ready; raises ``McpServerError`` if it is
        failed or closed, ``TimeoutError`` on the deadline."""
        await self._health.wait_ready(timeout_s)

    async def __aenter__(self) -> Self:
        if self._opened:
            raise RuntimeError("Cannot reopen an McpConnection once it has been opened.")
        self._opened = True
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._tg.start(self._supervise)
        except BaseException as exc:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._health.set(ConnectionState.CLOSED, "the server could not be started")
            if not isinstance(exc, Exception):
                raise
            cause = leaf(exc)
            if type(cause) is McpServerError and not cause.target:
                raise McpServerError(
                    self.name, cause.detail, target=self.config.describe()
                ) from None
            if isinstance(cause, AgentrtError):
                raise cause from None
            raise McpServerError(
                self.name, f"could not start: {self._why(cause)}", target=self.config.describe()
            ) from cause
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None
        self._health.set(ConnectionState.CLOSED, "the connection was closed")
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc_val, exc_tb)

    async def call_tool(
        self,
        remote_name: str,
        arguments: Mapping[str, Any],
        *,
        context: ToolContext | None = None,
        display_name: str | None = None,
    ) -> ToolOutput:
        """Call a tool by the server's own name; failures are error outputs.

        A tool whose task support is ``required`` (or ``optional``, with
        ``tasks.prefer``) runs as a task (see ``tasks``).  A destructive
        tool under ``destructive: approve`` runs once the person behind the
        run approves.  A call the server refused because it forgot the
        session, or that lost its HTTP connection under it, is sent once
        more on the new session when the tool is read-only or idempotent."""
        context = context or ToolContext()
        shown = display_name or remote_name
        if (live := self._live) is not None and live.ended.is_set():
            # The server hung up and the session has not noticed yet.
            self._mark_down(live, live.lost or "the connection was lost")
        if self._health.state in (ConnectionState.CONNECTING, ConnectionState.RESTARTING):
            # A server coming back is waited for within the call's own
            # deadline: the model should not spend a step on "restarting".
            started = anyio.current_time()
            timeout = min(self.config.call_timeout_s, context.timeout_s or math.inf)
            down = await self._await_return(timeout)
            if down is not None:
                return ToolOutput.of_text(down, is_error=True)
            left = max(0.0, timeout - (anyio.current_time() - started))
            context = msgspec.structs.replace(context, timeout_s=left)
        caller = Caller(
            run_id=context.run_id,
            rollout_id=context.rollout_id,
            call_id=context.call_id,
            tool=shown,
        )
        refusal = await self._admit(remote_name, arguments, caller)
        live, tool = self._live, self._catalog.tools.get(remote_name)
        if refusal is not None or live is None or tool is None:
            return ToolOutput.of_text(refusal or self._health.unavailable(), is_error=True)
        if self._content.is_client_tool(remote_name):
            request = self._requester(live)
            return await self._content.call(live.session, request, remote_name, arguments, shown)
        support = self._catalog.task_support.get(remote_name)
        if support == "required" or (support == "optional" and self.config.tasks.prefer):
            return await live.tasks.call(
                remote_name, arguments, caller=caller, shown=shown, timeout_s=context.timeout_s
            )
        with self._requests.calling(caller):
            output = await self._call_once(live, remote_name, arguments, shown, context)
            if output is None and is_idempotent(tool.spec.annotations):
                # The server forgot the session, or the connection dropped
                # under the call: once reconnected, one more try.
                with contextlib.suppress(McpServerError, TimeoutError):
                    await self._health.wait_ready(self.config.connect_timeout_s)
                if self._live is not None:
                    output = await self._call_once(
                        self._live, remote_name, arguments, shown, context
                    )
        if output is None:
            text = self._lost_text(f"during a call to {shown!r}")
            return ToolOutput.of_text(text, is_error=True)
        return output

    async def _await_return(self, timeout_s: float) -> str | None:
        """Wait up to ``timeout_s`` for a (re)starting server to be ready;
        None once it is, else why the call cannot run (it stayed down)."""
        try:
            await self._health.wait_ready(timeout_s)
        except McpServerError:
            return self._health.unavailable()
        except TimeoutError:
            return (
                f"MCP server {self.name!r} did not come back within the call's "
                f"{timeout_s:g} s ({self._health.reason})"
            )
        return None

    async def _admit(
        self, remote_name: str, arguments: Mapping[str, Any], caller: Caller
    ) -> str | None:
        """Why a call cannot be sent now (see ``_refusal``), or a person's
        refusal of a destructive tool under ``destructive: approve``."""
        refusal = self._refusal(remote_name)
        tool = self._catalog.tools.get(remote_name)
        if refusal is not None or tool is None or self.config.destructive != "approve":
            return refusal
        if not is_destructive(tool.spec.annotations):
            return None
        return await approve_call(
            self.name,
            self._requests.hooks,
            caller.tool,
            arguments,
            caller,
            timeout_s=self.config.elicitation.timeout_s,
        )

    async def _call_once(
        self,
        live: _Live,
        remote_name: str,
        arguments: Mapping[str, Any],
        shown: str,
        context: ToolContext,
    ) -> ToolOutput | None:
        """One ``tools/call``; None when the server forgot the session or
        (over HTTP) the connection was lost under the call."""
        timeout = min(self.config.call_timeout_s, context.timeout_s or math.inf)
        try:
            with anyio.fail_after(timeout + _GUARD_S):
                result = await live.session.call_tool(
                    remote_name,
                    dict(arguments),
                    read_timeout_seconds=timeout,
                    progress_callback=self._progress_relay(shown, context),
                    meta=_call_meta(context),
                )
        except (*CALL_FAILURES, RuntimeError) as exc:
            denied = self._auth_denied() if isinstance(exc, MCPError) else None
            text = str(denied) if denied else self._call_failure(live, exc, shown, timeout)
            # The server forgot the session, or (over HTTP) the connection
            # went away under the call (a server restarting on its port): the
            # caller may try once more.  A stdio server that died mid-call
            # may have run it: that stays an error.
            lost = isinstance(exc, anyio.BrokenResourceError | anyio.ClosedResourceError) or (
                isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED
            )
            over_http = isinstance(self.config, HttpServerConfig)
            gone = live.forgotten or (lost and over_http and not denied)
            return None if gone else ToolOutput.of_text(text, is_error=True)
        return tool_output(result)

    async def cancel_run(self, run_id: str) -> int:
        """Cancel the tasks ``run_id`` started that are still running (its
        run ended); returns how many."""
        live = self._live
        return live.tasks.cancel_run(run_id) if live is not None else 0

    # -- roots ----------------------------------------------------------

    def roots(self) -> list[Path]:
        """The folders offered to the server as roots now."""
        return self._requests.roots()

    async def set_roots(self, owner: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` as roots for ``owner``, replacing what it offered
        before (empty: withdraw them); the server hears
        ``notifications/roots/list_changed``.  Every call on this
        connection sees them: a rollout's workspace goes to a connection of
        its own (``per_rollout``, see ``rollouts``)."""
        await self._requests.set_roots(owner, paths)

    def _refusal(self, remote_name: str) -> str | None:
        """Why a call cannot be sent now, or None."""
        if self._health.state is not ConnectionState.READY or self._live is None:
            return self._health.unavailable()
        if (decision := self._catalog.blocked.get(remote_name)) is not None:
            return decision.message
        if (why := self._catalog.refused.get(remote_name)) is not None:
            return why
        if remote_name not in self._catalog.tools:
            return f"MCP server {self.name!r} does not offer a tool {remote_name!r} (any more)"
        return None

    def _progress_relay(self, shown: str, context: ToolContext) -> ProgressFnT:
        async def relay(progress: float, total: float | None, message: str | None) -> None:
            payload = {
                "server": self.name,
                "tool": shown,
                "call_id": context.call_id,
                "progress": progress,
                "total": total,
                "message": message,
            }
            if context.notify is not None:
                await context.notify("progress", payload)
            await self._emit("progress", payload)

        return relay

    def _call_failure(self, live: _Live, exc: Exception, shown: str, timeout: float) -> str:
        where = f"MCP tool {shown!r} (server {self.name!r})"
        match exc:
            case MCPError(code=types.REQUEST_TIMEOUT):
                return f"{where} timed out after {timeout:g} s; the server was asked to cancel it"
            case MCPError() if exc.code == types.CONNECTION_CLOSED or self._session_gone(live, exc):
                return self._lost(live, f"during a call to {shown!r}")
            case MCPError():
                return f"{where} failed: {exc.message} (MCP error {exc.code})"
            case anyio.BrokenResourceError() | anyio.ClosedResourceError():
                return self._lost(live, f"during a call to {shown!r}")
            case TimeoutError():
                live.lost = f"no answer from the server {timeout + _GUARD_S:g} s into a call"
                self._mark_down(live, live.lost)
                return f"{where} got no answer at all; reconnecting to the server"
            case _:  # a result that fails validation, or a shape the client did not ask for
                what = "a malformed" if isinstance(exc, ValidationError) else "an unsupported"
                return f"{where} returned {what} result: {exc}"

    async def list_resources(self) -> list[types.Resource]:
        """Every resource the server lists (following ``nextCursor``)."""
        live = self._require_live()
        resources: list[types.Resource] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._request(live, live.session.list_resources(params=params))
            resources.extend(page.resources)
            if (cursor := page.next_cursor) is None:
                return resources
        raise McpServerError(self.name, f"resources/list did not end after {MAX_PAGES} pages")

    async def read_resource(self, uri: str) -> list[ToolContent]:
        """The contents of one resource."""
        live = self._require_live()
        result = await self._request(live, live.session.read_resource(uri))
        return resource_contents(result.contents)

    async def attached(self, uri: str) -> str:
        """The resource ``uri`` as an agent's context shows it, kept current
        (``ServerContent.attached``).  Raises ``McpServerError`` when it
        cannot be read."""
        live = await self._ready_live()
        return await self._content.attached(live.session, self._requester(live), uri)

    async def prompt(
        self, name: str, arguments: Mapping[str, str], *, complete: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """Prompt ``name``'s messages as (role, text) pairs, with
        ``arguments``, those in ``complete`` completed by the server first
        (``ServerContent.prompt``).  Raises ``McpServerError`` when the
        server has no such prompt or no completion."""
        live = await self._ready_live()
        return await self._content.prompt(
            live.session, self._requester(live), name, arguments, complete
        )

    async def _ready_live(self) -> _Live:
        with contextlib.suppress(TimeoutError):  # then _require_live says why
            await self._health.wait_ready(self.config.connect_timeout_s)
        return self._require_live()

    def _requester(self, live: _Live) -> Request:
        async def request(awaitable: Awaitable[Any]) -> Any:
            return await self._request(live, awaitable)

        return request

    # -- supervision ----------------------------------------------------

    async def _supervise(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        first = True
        backoff = RestartBackoff(self.config.restart.backoff())
        while True:
            started = anyio.current_time()

            def ready() -> None:
                nonlocal first
                if first:
                    first = False
                    task_status.started()

            try:
                reason = await self._attempt(ready)
            except Exception as exc:
                if first:
                    raise
                reason = self._why(exc)
            if self._health.state is ConnectionState.CLOSED:
                return
            delay = backoff.crashed(healthy_for=anyio.current_time() - started)
            if delay is not None and self._forgotten:
                # The server is up and merely forgot the session (it restarted):
                # a new session now, not after a crash loop's growing backoff.
                delay = min(delay, self.config.restart.initial_delay_s)
            self._forgotten = False
            if delay is None:
                failures = backoff.crashes
                _log.error("mcp.server.failed", server=self.name, reason=reason, failures=failures)
                self._health.set(
                    ConnectionState.FAILED, f"failed {failures} times in a row; last: {reason}"
                )
                await self._emit("state", self._health.payload())
                return
            retry_at = anyio.current_time() + delay
            self._health.set(ConnectionState.RESTARTING, reason, retry_at=retry_at)
            _log.warning("mcp.server.restarting", server=self.name, reason=reason, delay_s=delay)
            await self._emit("state", self._health.payload())
            await anyio.sleep(delay)
            self.restarts += 1

    async def _attempt(self, ready: Callable[[], None]) -> str:
        """One session from start to end; returns why it ended."""
        tail = StderrTail(self.name) if isinstance(self.config, StdioServerConfig) else None
        self._tail = tail
        reason = ""
        try:
            async with anyio.create_task_group() as tg:
                if tail is not None:
                    tg.start_soon(tail.pump)
                try:
                    reason = await self._session(ready)
                finally:
                    tg.cancel_scope.cancel()
            return reason
        finally:
            self._live = None
            if tail is not None:
                tail.close()

    async def _session(self, ready: Callable[[], None]) -> str:
        ended = anyio.Event()
        reason = ""
        rejected: list[int] = []
        async with open_transport(
            self.config, self._tail, auth=self._http_auth(), on_session_rejected=rejected.append
        ) as (read, write):
            live: _Live | None = None

            async def on_message(message: types.ServerNotification | Exception) -> None:
                if live is not None:
                    await self._on_message(live, message)

            # Our own dispatcher: task-augmented calls go out on it (see ``tasks``).
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(
                EndWatchingStream(read, ended, on_message=self._content.on_wire), write
            )
            session = ClientSession(
                logging_callback=self._on_log,
                message_handler=on_message,
                sampling_callback=self._requests.sampling,
                elicitation_callback=self._requests.elicitation,
                list_roots_callback=self._requests.list_roots,
                client_info=types.Implementation(name="agentrt", version=__version__),
                dispatcher=dispatcher,
            )
            async with session, anyio.create_task_group() as tg:
                current: _Live
                live = current = _Live(
                    session=session,
                    ended=ended,
                    dispatcher=dispatcher,
                    tasks=SessionTasks(
                        session,
                        dispatcher,
                        self.config.tasks,
                        server=self.name,
                        request_timeout_s=self.config.request_timeout_s,
                        tg=tg,
                        requests=self._requests,
                        sink=self._emit,
                        failure=lambda exc, shown, t: self._call_failure(current, exc, shown, t),
                    ),
                    rejected=rejected,
                )
                self._requests.on_roots_changed = self._roots_changed
                await self._handshake(live)
                await self._refresh(live)
                await self._content.new_session(
                    live.session, live.capabilities, self._requester(live)
                )
                self._live = live
                self._health.set(ConnectionState.READY)
                await self._emit("state", self._health.payload())
                ready()
                tg.start_soon(self._relist_on_change, live)
                if self.config.keepalive_s is not None:
                    tg.start_soon(self._keepalive, live, self.config.keepalive_s)
                await ended.wait()
                if self._tail is not None:
                    self._tail.drain()  # the last words of a dying server, before they are quoted
                reason = live.lost or self._ended_reason()
                self._forgotten = live.forgotten
                self._mark_down(live, reason)
                tg.cancel_scope.cancel()
        return reason

    async def _handshake(self, live: _Live) -> None:
        try:
            wait = self._auth.wait_s if self._auth is not None else 0.0
            with anyio.fail_after(self.config.connect_timeout_s + wait):
                result = await live.session.initialize()
                live.capabilities = result.capabilities
                if self.config.log_level is not None and result.capabilities.logging:
                    await live.session.send_request(
                        types.SetLevelRequest(
                            params=types.SetLevelRequestParams(level=self.config.log_level)
                        ),
                        types.EmptyResult,
                    )
        except TimeoutError:
            if (denied := self._auth_denied()) is not None:
                raise denied from None
            raise McpServerError(
                self.name,
                f"no answer to the MCP handshake within {self.config.connect_timeout_s:g} s"
                f"{self._stderr_note()}",
            ) from None
        except MCPError as exc:
            if (denied := self._auth_denied()) is not None:
                raise denied from None
            raise McpServerError(
                self.name, f"the handshake failed: {describe(exc)}{self._stderr_note()}"
            ) from None
        _log.info(
            "mcp.server.connected",
            server=self.name,
            protocol=result.protocol_version,
            server_info=result.server_info.name,
        )

    async def _refresh(self, live: _Live) -> None:
        """List every tool, check pins, and publish the new catalog."""

        async def fetch(cursor: str | None) -> types.ListToolsResult:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page: types.ListToolsResult = await self._request(
                live, live.session.list_tools(params=params)
            )
            return page

        listed = await list_all_tools(self.name, fetch)
        catalog = await build_catalog(
            self,
            listed,
            approved=self.config.approved,
            new_tools=self.config.new_tools,
            pins=self._pins,
            destructive=self.config.destructive,
        )
        for remote, decision in catalog.blocked.items():
            if self._catalog.blocked.get(remote) != decision:
                _log.warning(
                    "mcp.tool.blocked", server=self.name, tool=remote, why=decision.message
                )
                await self._emit(
                    "log", {"server": self.name, "level": "warning", "data": decision.message}
                )
        self._offer_client_tools(live, catalog)
        self._catalog = catalog
        _log.info(
            "mcp.tools.listed",
            server=self.name,
            offered=len(catalog.tools),
            blocked=len(catalog.blocked),
        )

    def _offer_client_tools(self, live: _Live, catalog: Catalog) -> None:
        """The resource and prompt tools, as configured (``ServerContent``)."""
        offered = self._content.client_tools(live.capabilities)
        taken = {t.spec.name for t in catalog.tools.values()}
        for remote, name in namespaced_names(self.name, offered).items():
            if name in taken:  # the server has a tool of that name: it keeps it
                _log.warning("mcp.client_tool.shadowed", server=self.name, tool=name)
                continue
            description, schema = offered[remote]
            spec = ToolSpec(
                name=name,
                description=description,
                parameters=schema,
                annotations={"readOnlyHint": True},
            )
            catalog.tools[remote] = McpTool(self, remote_name=remote, spec=spec, digest="")

    async def _relist_on_change(self, live: _Live) -> None:
        while True:
            await live.relist.wait()
            live.relist = anyio.Event()
            try:
                await self._refresh(live)
            except (McpServerError, MCPError, TimeoutError, ValidationError) as exc:
                _log.warning("mcp.tools.relist_failed", server=self.name, error=describe(exc))

    async def _keepalive(self, live: _Live, interval_s: float) -> None:
        """Ping every ``interval_s``; a ping that fails ends the session, so
        it is replaced now rather than when a call finds it dead."""
        while True:
            await anyio.sleep(interval_s)
            try:
                await self._request(live, live.session.send_ping())
            except McpServerError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, MCPError) and self._session_gone(live, cause)):
                    live.lost = live.lost or f"no answer to a ping: {exc.detail}"
                _log.warning("mcp.server.ping_failed", server=self.name, reason=live.lost)
                live.ended.set()
                return

    async def _request(self, live: _Live, request: Any) -> Any:
        """Await an SDK request with the configured deadline; failures become
        ``McpServerError`` naming the server."""
        try:
            with anyio.fail_after(self.config.request_timeout_s):
                return await request
        except (MCPError, TimeoutError, ValidationError) as exc:
            if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
                raise McpServerError(self.name, self._lost(live, "during a request")) from exc
            if isinstance(exc, MCPError) and (denied := self._auth_denied()) is not None:
                raise denied from exc
            raise McpServerError(self.name, describe(exc)) from exc

    # -- notifications --------------------------------------------------

    async def _on_message(self, live: _Live, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, Exception):
            # Like the SDK's own client: a line that is not JSON-RPC (a
            # banner on stdout) is logged and skipped.
            live.malformed = malformed_detail(message)
            _log.warning("mcp.server.malformed_message", server=self.name, detail=live.malformed)
            await self._emit(
                "log",
                {
                    "server": self.name,
                    "level": "warning",
                    "logger": "agentrt.mcp",
                    "data": f"malformed message from the server, ignored: {live.malformed}",
                },
            )
        elif isinstance(message, types.ToolListChangedNotification):
            live.relist.set()
        elif isinstance(message, types.ResourceListChangedNotification):
            # The resource tools list afresh on every call; whoever shows a
            # catalog of them hears it changed.
            await self._emit("resources_changed", {"server": self.name})
        elif isinstance(message, types.PromptListChangedNotification):
            # Likewise: the prompt tools list afresh, a prompt is got per rollout.
            await self._emit("prompts_changed", {"server": self.name})

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self._emit(
            "log",
            {
                "server": self.name,
                "level": params.level,
                "logger": params.logger,
                "data": params.data,
            },
        )

    async def _emit(self, kind: str, payload: Mapping[str, Any]) -> None:
        if self._sink is None:
            return
        try:
            await self._sink(kind, payload)
        except Exception:
            _log.exception("mcp.notification_sink_failed", server=self.name, kind=kind)

    # -- state and messages ---------------------------------------------

    def _http_auth(self) -> httpx2.Auth | None:
        """The OAuth of an HTTP server, made on first use (it reads secrets
        and the token store) and kept across reconnects."""
        if not isinstance(self.config, HttpServerConfig):
            return None
        if self._auth is None:
            self._auth = McpAuth(self.config, authorize=self._authorize)
        return self._auth.httpx_auth()

    def _auth_denied(self) -> McpServerError | None:
        """The "authorization required" error when the last request was refused for it."""
        return self._auth.error() if self._auth is not None else None

    def _stderr_note(self) -> str:
        text = self._tail.text()[-_STDERR_NOTE_CHARS:] if self._tail is not None else ""
        return f"; its stderr ended with: {text!r}" if text else ""

    def _ended_reason(self) -> str:
        if isinstance(self.config, StdioServerConfig):
            return f"the server process exited (its stdout closed){self._stderr_note()}"
        return "the server closed the connection"

    def _why(self, exc: BaseException) -> str:
        cause = leaf(exc)
        if isinstance(cause, McpServerError):
            return cause.detail
        return describe(cause) + self._stderr_note()

    def _session_gone(self, live: _Live, exc: MCPError) -> bool:
        """The server forgot our session: a 404 (the spec) or, from servers
        that answer 400 instead, the SDK's stand-in error after one."""
        if not isinstance(self.config, HttpServerConfig):
            return False
        if session_forgotten(exc) or (exc.code == types.INTERNAL_ERROR and live.rejected):
            status = f"HTTP {live.rejected[-1]}: " if live.rejected else ""
            live.lost = f"the server no longer knows our session ({status}{exc.message})"
            live.forgotten = True
            return True
        return False

    async def _roots_changed(self) -> None:
        live = self._live
        if live is None:
            return
        try:
            with anyio.fail_after(self.config.request_timeout_s):
                await live.session.send_notification(types.RootsListChangedNotification())
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            _log.warning("mcp.roots.notify_failed", server=self.name, error=describe(exc))

    def _mark_down(self, live: _Live, reason: str) -> None:
        """Stop routing calls to ``live`` at once, before its teardown."""
        live.ended.set()
        if self._live is live:
            self._live = None
        if self._health.state in (ConnectionState.READY, ConnectionState.RESTARTING):
            self._health.set(ConnectionState.RESTARTING, reason)

    def _lost(self, live: _Live, when: str) -> str:
        self._mark_down(live, live.lost or "the connection was lost")
        return self._lost_text(when)

    def _lost_text(self, when: str) -> str:
        return (
            f"MCP server {self.name!r}: connection lost {when}; the server is being restarted "
            "and the call may or may not have run; try again shortly"
        )

    def _require_live(self) -> _Live:
        if self._health.state is not ConnectionState.READY or self._live is None:
            raise McpServerError(
                self.name, self._health.unavailable().removeprefix(f"MCP server {self.name!r} ")
            )
        return self._live
