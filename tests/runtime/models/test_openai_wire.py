"""Pure pieces of the OpenAI backend: the SSE decoder, the identity cache of
encoded messages, and the transport-error classifier."""

from __future__ import annotations

import aiohttp
import httpx
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.models.http._http_client import TransportFailure, classify_transport_error
from agentrt.runtime.models.http._sse import SSEDecoder
from agentrt.runtime.wire._chat_parts import EncodedParts, wire_messages
from agentrt.runtime.wire._common import encoder


def test_sse_events_split_anywhere_come_out_whole() -> None:
    stream = b'data: {"a": 1}\n\n: comment\n\nevent: x\ndata: two\ndata: lines\n\ndata:[DONE]\n\n'
    for cut in range(len(stream) + 1):
        decoder = SSEDecoder()
        events = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) + decoder.close()
        assert events == [b'{"a": 1}', b"two\nlines", b"[DONE]"], cut


@given(
    st.lists(
        st.binary(min_size=0, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
        max_size=6,
    ),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.integers(1, 7),
)
def test_sse_any_payloads_any_line_endings_any_chunking(
    payloads: list[bytes], newline: bytes, step: int
) -> None:
    body = b"".join(b"data: " + p + newline + newline for p in payloads)
    decoder = SSEDecoder()
    events: list[bytes] = []
    for i in range(0, len(body), step):
        events += decoder.feed(body[i : i + step])
    events += decoder.close()
    assert events == [p for p in payloads if p]


def test_sse_a_torn_last_line_is_dropped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']
    assert decoder.close() == []


CONVERSATION: list[ChatMessage] = [
    SystemMessage("sys"),
    UserMessage("hi", name="ann"),
    AssistantMessage(tool_calls=[ToolCall("c1", FunctionCall("f", "{"))]),
    ToolMessage("r", tool_call_id="c1"),
    AssistantMessage(),
]


def test_encoded_parts_match_the_plain_conversion() -> None:
    parts = EncodedParts()
    raw = parts.messages(CONVERSATION)
    plain = msgspec.json.decode(encoder.encode(wire_messages(CONVERSATION)))
    assert [msgspec.json.decode(r) for r in raw] == plain
    assert plain[4] == {"role": "assistant", "content": ""}
    assert "name" not in plain[0]
    tools = [ToolSpec(name="f", description="d")]
    assert msgspec.json.decode(parts.tools(tools)[0]) == {
        "function": {"name": "f", "parameters": {"type": "object", "properties": {}},
                     "description": "d"},
        "type": "function",
    }  # fmt: skip


def test_encoded_parts_reuse_by_identity_and_stay_bounded() -> None:
    parts = EncodedParts(max_entries=10)
    first = parts.messages(CONVERSATION)
    again = parts.messages(CONVERSATION)
    assert all(a is b for a, b in zip(first, again, strict=True))
    # An equal but distinct message is encoded anew (identity, not equality).
    twin: list[ChatMessage] = [SystemMessage("sys")]
    assert parts.messages(twin)[0] is not first[0]
    for i in range(50):
        parts.messages([UserMessage(f"m{i}")])
    assert len(parts) <= 10
    by_size = EncodedParts(max_bytes=2_000)
    for i in range(50):
        by_size.messages([UserMessage("x" * 300 + str(i))])
    assert 0 < by_size.encoded_bytes <= 2_000
    assert msgspec.json.decode(parts.messages(CONVERSATION)[1]) == {
        "role": "user",
        "content": "hi",
        "name": "ann",
    }


def _wrapped(cause: BaseException, outer: type[httpx.TransportError]) -> httpx.TransportError:
    exc = outer(str(cause))
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "verdict"),
    [
        # The cause decides, whatever httpx class the transport raised.
        (
            _wrapped(
                aiohttp.ClientConnectorError(
                    aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
                    ConnectionRefusedError(111, "refused"),
                ),
                httpx.ConnectError,
            ),
            TransportFailure.CONNECT,
        ),
        (
            _wrapped(aiohttp.ServerDisconnectedError(), httpx.ReadError),
            TransportFailure.DROPPED,
        ),
        (
            _wrapped(aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError),
            TransportFailure.DROPPED,
        ),
        (_wrapped(aiohttp.SocketTimeoutError(), httpx.ReadTimeout), TransportFailure.TIMEOUT),
        (_wrapped(aiohttp.ClientPayloadError("short"), httpx.ReadError), TransportFailure.DROPPED),
        (httpx.ReadTimeout("t"), TransportFailure.TIMEOUT),
        (httpx.ConnectError("c"), TransportFailure.CONNECT),
        (httpx.RemoteProtocolError("p"), TransportFailure.PROTOCOL),
        (ConnectionResetError(), TransportFailure.DROPPED),
        (ValueError("a bug"), None),
    ],
)
def test_transport_errors_are_classified_by_cause(
    exc: BaseException, verdict: TransportFailure | None
) -> None:
    assert classify_transport_error(exc) is verdict
