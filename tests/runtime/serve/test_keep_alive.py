"""The daemon's idle keep-alive connections (``[server] keep_alive_s``):
held longer than clients keep theirs (a server that closes first races the
client's next request, which meets a reset), not cut by the headers'
deadline while idle, and closed once idle that long."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from agentrt.runtime.config._config_file import ServerConfig
from agentrt.runtime.models.http._http_client import HttpClientConfig

pytestmark = pytest.mark.anyio

UVICORN_KEEP_ALIVE_S: float = (
    inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
)
"""What servers on uvicorn (vLLM, SGLang) hold an idle connection: 5 s."""

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def _exchange(stream: ByteStream, reader: BufferedByteReceiveStream) -> bytes:
    """Send ``GET /healthz`` on ``stream`` and read its whole reply; its
    status line."""
    await stream.send(HEALTHZ)
    head = await reader.receive_until(b"\r\n\r\n", 65536)
    lines = head.split(b"\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}
    await reader.receive_exactly(int(fields[b"content-length"]))
    return lines[0]


def test_the_client_lets_go_of_idle_connections_before_servers_do() -> None:
    # The client closes an idle connection before a uvicorn server (vLLM,
    # SGLang) would, and the daemon holds one longer than any client keeps it.
    expiry = HttpClientConfig().keepalive_expiry_s
    assert expiry < UVICORN_KEEP_ALIVE_S
    assert ServerConfig().keep_alive_s > max(UVICORN_KEEP_ALIVE_S, expiry)


@pytest.mark.slow
async def test_an_idle_connection_is_held_past_uvicorns_keep_alive(
    tmp_path: Path, daemon_kit: Any
) -> None:
    # The default keep_alive_s; a short header deadline, which must not cut
    # an idle connection either (it runs from a request's first bytes).
    config = daemon_kit.config(tmp_path, server={"header_timeout_s": 1.0})
    assert config.server.keep_alive_s > UVICORN_KEEP_ALIVE_S + 10  # room for a slow machine
    async with daemon_kit.running(config) as endpoint:
        with anyio.fail_after(60):
            async with await anyio.connect_tcp("127.0.0.1", endpoint.port) as stream:
                reader = BufferedByteReceiveStream(stream)
                assert await _exchange(stream, reader) == b"HTTP/1.1 200 OK"
                # Idle past uvicorn's 5 s and the header deadline (a lower
                # bound: a loaded machine only adds to it).
                await anyio.sleep(UVICORN_KEEP_ALIVE_S + 1)
                assert await _exchange(stream, reader) == b"HTTP/1.1 200 OK"


async def test_a_connection_idle_past_keep_alive_is_closed(tmp_path: Path, daemon_kit: Any) -> None:
    # The header deadline is far off: what closes the connection is keep_alive_s.
    config = daemon_kit.config(tmp_path, server={"keep_alive_s": 1.0, "header_timeout_s": 120})
    async with daemon_kit.running(config) as endpoint:
        # A hang guard well below header_timeout_s.
        with anyio.fail_after(60):
            async with await anyio.connect_tcp("127.0.0.1", endpoint.port) as stream:
                reader = BufferedByteReceiveStream(stream)
                assert await _exchange(stream, reader) == b"HTTP/1.1 200 OK"
                # Used again before keep_alive_s: the same connection answers.
                assert await _exchange(stream, reader) == b"HTTP/1.1 200 OK"
                # Then left idle: the daemon closes it, sending nothing (no 408).
                with pytest.raises(anyio.EndOfStream):
                    await reader.receive()
