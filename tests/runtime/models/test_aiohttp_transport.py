"""``AiohttpTransport`` against a real aiohttp server on loopback: requests
and replies through httpx's interface, streamed bodies, the timeout
extension, and aiohttp's failures raised as httpx's with the cause kept;
``post`` (a whole reply without httpx) and ``poster`` on other transports."""

from __future__ import annotations

import gc
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable

import aiohttp
import anyio
import httpx
import pytest
from aiohttp import web

from agentrt.runtime.models.http._aiohttp_transport import HttpReply, as_httpx_error
from agentrt.runtime.models.http._http_client import (
    TransportFailure,
    classify_transport_error,
    make_transport,
    poster,
)
from tests._support.resets import reset_connection

pytestmark = [pytest.mark.anyio, pytest.mark.uvloop]

DROPPED: list[str] = []
"""Paths of the requests whose connection ``_stalled`` saw the client drop."""


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {"body": body.decode(), "id": request.headers.get("x-request-id", "")},
        headers={"x-served-by": "test"},
    )


async def _chunks(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for i in range(3):
        await response.write(f"data: {i}\n\n".encode())
        await anyio.sleep(0.01)
    await response.write_eof()
    return response


async def _slow(request: web.Request) -> web.Response:
    await anyio.sleep(1)
    return web.Response(text="late")


async def _stalled(request: web.Request) -> web.StreamResponse:
    """Headers and half a body, then nothing: records whether the client
    dropped the connection."""
    response = web.StreamResponse(headers={"content-type": "application/json"})
    response.content_length = 100
    await response.prepare(request)
    await response.write(b'{"half": ')
    transport = request.transport
    for _ in range(300):
        if transport is None or transport.is_closing():
            DROPPED.append(request.path)
            break
        await anyio.sleep(0.01)
    return response


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/echo", _echo)
    app.router.add_get("/chunks", _chunks)
    app.router.add_get("/slow", _slow)
    app.router.add_post("/slow", _slow)
    app.router.add_post("/stalled", _stalled)
    app.router.add_post("/reset", reset_connection)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_request_and_its_reply_pass_through(server: str) -> None:
    transport = make_transport()
    try:
        request = httpx.Request(
            "POST", f"{server}/echo", headers={"x-request-id": "r-1"}, content=b"hello"
        )
        response = await transport.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
    finally:
        await transport.aclose()
    assert response.status_code == 200
    assert response.headers["x-served-by"] == "test"
    assert httpx.Response(200, content=body).json() == {"body": "hello", "id": "r-1"}


async def test_a_client_reply_names_its_request(server: str) -> None:
    async with httpx.AsyncClient(transport=make_transport()) as client:
        response = await client.post(f"{server}/echo", content=b"hi")
    assert response.request.url == f"{server}/echo"  # httpx's client attaches it


async def test_nothing_of_the_request_is_held_while_the_reply_is_awaited(server: str) -> None:
    # 1,000 calls in flight: every object alive across the wait is walked by
    # each collection, so the transport lets go of the request once sent.
    transport = make_transport()
    request = httpx.Request(
        "GET", f"{server}/slow", headers={"x-request-id": "r-2"}, extensions={"timeout": {}}
    )
    alive = weakref.ref(request)
    try:
        async with anyio.create_task_group() as tg:
            replies: list[httpx.Response] = []

            async def send(pending: Awaitable[httpx.Response]) -> None:
                replies.append(await pending)

            tg.start_soon(send, transport.handle_async_request(request))
            del request
            await anyio.sleep(0.3)  # the server answers after 1 s
            gc.collect()
            assert alive() is None
        assert replies[0].status_code == 200
        await replies[0].aclose()
    finally:
        await transport.aclose()


async def test_a_streamed_reply_arrives_in_chunks(server: str) -> None:
    async with (
        httpx.AsyncClient(transport=make_transport()) as client,
        client.stream("GET", f"{server}/chunks") as response,
    ):
        chunks = [chunk async for chunk in response.aiter_raw()]
    assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(chunks) >= 2  # not buffered into one


async def test_the_read_timeout_extension_applies(server: str) -> None:
    async with httpx.AsyncClient(
        transport=make_transport(), timeout=httpx.Timeout(5.0, read=0.2)
    ) as client:
        with pytest.raises(httpx.TimeoutException) as caught:
            await client.get(f"{server}/slow")
    assert isinstance(caught.value.__cause__, aiohttp.ClientError)
    assert classify_transport_error(caught.value) is TransportFailure.TIMEOUT


@pytest.mark.parametrize("via", ["httpx", "post"])
async def test_a_refused_connection_is_an_httpx_error_with_its_cause(via: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    transport = make_transport()
    sending = (
        transport.post(url, b"", [])
        if via == "post"
        else transport.handle_async_request(httpx.Request("GET", url))
    )
    try:
        with pytest.raises(httpx.TransportError) as caught:
            await sending
    finally:
        await transport.aclose()
    assert type(caught.value) is httpx.ConnectError
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)
    assert classify_transport_error(caught.value) is TransportFailure.CONNECT


@pytest.mark.parametrize("via", ["httpx", "post"])
async def test_a_connection_reset_in_use_is_a_read_error_classified_dropped(
    server: str, via: str
) -> None:
    # Not "ConnectTimeout: Connection reset by peer": the connection was open.
    transport = make_transport()
    url = f"{server}/reset"
    sending = (
        transport.post(url, b"{}", [])
        if via == "post"
        else transport.handle_async_request(httpx.Request("POST", url, content=b"{}"))
    )
    try:
        with pytest.raises(httpx.TransportError) as caught:
            await sending
    finally:
        await transport.aclose()
    assert type(caught.value) is httpx.ReadError
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectionError)
    assert classify_transport_error(caught.value) is TransportFailure.DROPPED


def _connector_error() -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # A connection cut in use is a ReadError, as with httpx's own
        # transport (it was a ConnectTimeout: "ConnectTimeout: Connection
        # reset by peer" on a connection open for seconds).
        (aiohttp.ServerDisconnectedError(), httpx.ReadError),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError),
        (aiohttp.ConnectionTimeoutError(), httpx.ConnectTimeout),
        (aiohttp.SocketTimeoutError(), httpx.ReadTimeout),
        (aiohttp.ServerTimeoutError(), httpx.TimeoutException),
        (_connector_error(), httpx.ConnectError),
        (aiohttp.ClientPayloadError("short"), httpx.ReadError),
        (ValueError("a bug"), None),
    ],
)
def test_aiohttp_errors_map_to_the_most_specific_httpx_error(
    error: Exception, expected: type[httpx.TransportError] | None
) -> None:
    mapped = as_httpx_error(error)
    if expected is None:
        assert mapped is None
    else:
        assert type(mapped) is expected


async def test_post_sends_the_body_and_headers_and_reads_the_whole_reply(server: str) -> None:
    transport = make_transport()
    try:
        reply = await transport.post(
            f"{server}/echo",
            b"hello",
            [("content-type", "application/json"), ("x-request-id", "r-3")],
            {"connect": 5.0, "read": 5.0, "pool": 5.0},
        )
    finally:
        await transport.aclose()
    assert isinstance(reply, HttpReply)
    assert reply.status == 200
    assert reply.headers.get("X-Served-By") == "test"  # case-insensitive
    assert httpx.Response(200, content=reply.body).json() == {"body": "hello", "id": "r-3"}


async def test_post_applies_the_read_timeout_and_raises_httpx_errors(server: str) -> None:
    transport = make_transport()
    try:
        with pytest.raises(httpx.TimeoutException) as caught:
            await transport.post(f"{server}/slow", b"", [], {"read": 0.2})
    finally:
        await transport.aclose()
    assert isinstance(caught.value.__cause__, aiohttp.ClientError)
    assert classify_transport_error(caught.value) is TransportFailure.TIMEOUT


async def test_a_post_cancelled_mid_body_drops_the_connection(server: str) -> None:
    DROPPED.clear()
    transport = make_transport()
    try:
        with anyio.move_on_after(0.3) as scope:
            await transport.post(f"{server}/stalled", b"", [])
        assert scope.cancelled_caught
        for _ in range(200):  # not left open, half read, in the pool
            if DROPPED:
                break
            await anyio.sleep(0.01)
    finally:
        await transport.aclose()
    assert DROPPED == ["/stalled"]


async def test_poster_uses_post_on_ours_and_httpx_on_any_other_transport() -> None:
    ours = make_transport()
    assert poster(ours) == ours.post
    await ours.aclose()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, headers={"Retry-After": "2"}, content=b"busy")

    post = poster(httpx.MockTransport(handler))
    reply = await post("http://model/v1/x", b"{}", [("x-request-id", "r-4")], {"read": 3.0})
    assert (reply.status, reply.headers.get("retry-after"), reply.body) == (503, "2", b"busy")
    assert seen[0].headers["x-request-id"] == "r-4"
    assert seen[0].content == b"{}"
    assert seen[0].extensions["timeout"] == {"read": 3.0}
