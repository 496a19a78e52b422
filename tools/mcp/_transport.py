"""Opening one MCP transport from configuration with the SDK's clients
(``open_transport``), and ``EndWatchingStream``, which tells the connection
when the transport's read side ended (the SDK has no public signal for it).
SSE reconnection and resumption are the SDK transport's own.

Must not import agents or aggregators.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Final, Generic, Self, TextIO, TypeVar

import anyio
import httpx2
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig

__all__ = ["EndWatchingStream", "StderrTail", "open_transport"]

_log = get_logger(__name__)

T = TypeVar("T")

#: How much of a server's stderr is kept for error messages.
_TAIL_LINES: Final = 20
_TAIL_CHARS: Final = 2000


class StderrTail:
    """A pipe the server writes its stderr to, and the last lines it wrote.

    The pump task reads without blocking the event loop; the tail is bounded
    (a chatty server cannot grow memory), and each line is also logged at
    debug level under the server's name."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._lines: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._partial = ""
        self._closed = False

    def _absorb(self, chunk: bytes) -> None:
        text = self._partial + chunk.decode("utf-8", errors="replace")
        *lines, self._partial = text.split("\n")
        if len(self._partial) > _TAIL_CHARS:
            lines.append(self._partial)
            self._partial = ""
        for line in lines:
            if line.strip():
                self._lines.append(line[-_TAIL_CHARS:])
                _log.debug("mcp.server.stderr", server=self._server, line=line[:500])

    def drain(self) -> bool:
        """Read what is in the pipe now without waiting; False at end of file."""
        while not self._closed:
            try:
                chunk = os.read(self._read_fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self._absorb(chunk)
        return False

    async def pump(self) -> None:
        """Read until end of file (all holders of the write end closed it)."""
        while await self._wait() and self.drain():
            pass

    async def _wait(self) -> bool:
        try:
            await anyio.wait_readable(self._read_fd)
        except anyio.ClosedResourceError:
            return False
        return True

    def close_writer(self) -> None:
        """Drop our copy of the write end once the child holds its own."""
        if not self.writer.closed:
            self.writer.close()

    def close(self) -> None:
        """Release both ends (after the pump stopped)."""
        self.close_writer()
        if not self._closed:
            self.drain()
            self._closed = True
            anyio.notify_closing(self._read_fd)
            os.close(self._read_fd)

    def text(self) -> str:
        """The last lines the server wrote to stderr, oldest first."""
        lines = list(self._lines)
        if self._partial.strip():
            lines.append(self._partial)
        joined = "\n".join(lines)
        return joined[-_TAIL_CHARS:]


class EndWatchingStream(Generic[T]):
    """A read stream that sets ``ended`` when the underlying one ends or is
    closed: the moment the SDK's dispatcher sees the server hang up.
    ``on_message`` (synchronous) sees each message as it is read, in the
    order the server sent them (the SDK handles notifications in tasks of
    their own, which may run after a later reply is delivered)."""

    def __init__(
        self,
        inner: ReadStream[T],
        ended: anyio.Event,
        on_message: Callable[[T], None] | None = None,
    ) -> None:
        self._inner = inner
        self._ended = ended
        self._on_message = on_message

    @property
    def last_context(self) -> Any:
        # The dispatcher reads the sender's contextvars snapshot off HTTP streams.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> T:
        try:
            message = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise
        if self._on_message is not None:
            self._on_message(message)
        return message

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _check_command(config: StdioServerConfig) -> None:
    """A clear error before spawning when the command cannot be found."""
    command = config.command
    if os.sep in command:
        if not os.access(command, os.X_OK):
            raise ConfigError(
                f"command {command!r} does not exist or is not executable",
                where=f"mcp server {config.name!r} ({config.describe()})",
            )
        return
    path = config.env.get("PATH", get_default_environment().get("PATH", os.defpath))
    if shutil.which(command, path=path) is None:
        raise ConfigError(
            f"command {command!r} not found on PATH",
            where=f"mcp server {config.name!r} ({config.describe()})",
        )


@contextlib.asynccontextmanager
async def _stdio(config: StdioServerConfig, tail: StderrTail) -> AsyncIterator[TransportStreams]:
    _check_command(config)
    params = StdioServerParameters(
        command=config.command,
        args=list(config.args),
        env=dict(config.env) or None,
        cwd=config.cwd,
    )
    try:
        transport = stdio_client(params, errlog=tail.writer)
        try:
            streams = await transport.__aenter__()
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise ConfigError(
                f"cannot start {config.command!r}: {exc}",
                where=f"mcp server {config.name!r} ({config.describe()})",
            ) from exc
        # The child holds its own copy now; ours would keep the pipe open forever.
        tail.close_writer()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_exit(transport)
            yield streams
    finally:
        tail.close_writer()


@contextlib.asynccontextmanager
async def _http(
    config: HttpServerConfig,
    auth: httpx2.Auth | None,
    on_session_rejected: Callable[[int], None] | None,
) -> AsyncIterator[TransportStreams]:
    client = create_mcp_http_client(
        headers=config.http_headers(),
        timeout=httpx2.Timeout(config.request_timeout_s, read=config.sse_read_timeout_s),
        auth=auth,
    )
    if on_session_rejected is not None:
        rejected = on_session_rejected

        async def watch(response: httpx2.Response) -> None:
            # A server that forgot our session answers 404 (the spec) or 400
            # (server-everything); the SDK hides which behind a JSON-RPC error.
            if response.status_code in (400, 404) and "mcp-session-id" in response.request.headers:
                rejected(response.status_code)

        client.event_hooks = {**client.event_hooks, "response": [watch]}
    async with client, streamable_http_client(config.url, http_client=client) as streams:
        yield streams


def open_transport(
    config: StdioServerConfig | HttpServerConfig,
    tail: StderrTail | None,
    *,
    auth: httpx2.Auth | None = None,
    on_session_rejected: Callable[[int], None] | None = None,
) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
    """The SDK transport for ``config`` (stdio: the SDK spawns the server in
    its own process group and kills the tree on exit; HTTP: with the
    configured headers and bearer token, and ``auth``: the connection's
    OAuth, see ``auth.McpAuth``): a context manager yielding the
    read and write streams a ``ClientSession`` runs on.  ``tail`` receives
    a stdio server's stderr (required for stdio); its ``pump`` must run in
    the caller's task group while the transport is open.
    ``on_session_rejected`` hears the status of every HTTP 400 or 404
    answer to a request that carried a session id."""
    if isinstance(config, StdioServerConfig):
        if tail is None:
            raise ValueError("a stdio transport needs a StderrTail")
        return _stdio(config, tail)
    return _http(config, auth, on_session_rejected)
