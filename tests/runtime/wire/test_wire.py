"""One OpenAI wire (``agentrt.runtime.wire``): what the model client sends,
the daemon reads unchanged; what the daemon writes, the client reads; and
the wire types are defined there and nowhere else."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.serve.openai._chat_translate import decode_request
from agentrt.runtime.wire._chat import (
    AssistantOut,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceOut,
    ChunkChoice,
    Delta,
    FunctionCallOut,
    LogprobsOut,
    PromptDetails,
    TokenLogprobOut,
    ToolCallDelta,
    ToolCallOut,
    TopLogprobOut,
    UsageOut,
    raw_chat_decoder,
)
from agentrt.runtime.wire._common import Extension, ModelCard, ModelList, ReplyModelList, encoder

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
WIRE = ROOT / "runtime" / "wire"
#: The package's source folders (what ``agentrt`` is made of).
PACKAGE = ("protocols", "runtime", "tools", "agents", "aggregators")

CALL = ToolCall(id="call_1", function=FunctionCall(name="search", arguments='{"q": "wire"}'))
CONVERSATION: list[ChatMessage] = [
    SystemMessage("be brief"),
    UserMessage("find the wire", name="ada"),
    AssistantMessage(content=None, tool_calls=[CALL]),
    ToolMessage("found: runtime/wire", "call_1"),
]
TOOLS = [
    ToolSpec(
        name="search",
        description="Search the code.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
    ),
    ToolSpec(name="noop"),
]
REQUEST = ModelRequest(
    messages=CONVERSATION,
    model="m",
    tools=TOOLS,
    tool_choice="required",
    sampling=SamplingParams(temperature=0.3, top_p=0.9, max_tokens=64, stop=["END"], seed=7),
    logprobs=True,
    top_logprobs=2,
)
EXTENSION = Extension(
    run_id="r1",
    status="succeeded",
    agent="a",
    rollouts=1,
    aggregate="first",
    cost_usd=0.0,
    model_calls=1,
)
USAGE = UsageOut(
    prompt_tokens=11,
    completion_tokens=3,
    total_tokens=14,
    prompt_tokens_details=PromptDetails(cached_tokens=5),
)
LOGPROBS = [
    TokenLogprobOut(
        token="hi",
        logprob=-0.5,
        bytes=list(b"hi"),
        top_logprobs=[TopLogprobOut(token="hi", logprob=-0.5, bytes=list(b"hi"))],
    )
]


def _daemon_completion(content: str | None, calls: list[ToolCallOut] | None) -> ChatCompletion:
    return ChatCompletion(
        id="chatcmpl-r1",
        created=1,
        model="m",
        choices=[
            ChoiceOut(
                message=AssistantOut(content=content, tool_calls=calls),
                finish_reason="tool_calls" if calls else "stop",
                logprobs=LogprobsOut(content=LOGPROBS),
            )
        ],
        usage=USAGE,
        agentrt=EXTENSION,
    )


def _daemon_stream() -> bytes:
    """A streamed answer as the daemon writes it: role, text with logprobs,
    a tool call, the finish, the usage chunk, ``[DONE]``."""
    call = ToolCallDelta(
        index=0, id="call_9", function=FunctionCallOut(name="search", arguments='{"q": 1}')
    )

    def chunk(*choices: ChunkChoice, **extra: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id="chatcmpl-r1", created=1, model="m", choices=list(choices), **extra
        )

    chunks = [
        chunk(ChunkChoice(delta=Delta(role="assistant"))),
        chunk(ChunkChoice(delta=Delta(content="hi"), logprobs=LogprobsOut(content=LOGPROBS))),
        chunk(ChunkChoice(delta=Delta(tool_calls=[call]))),
        chunk(ChunkChoice(delta=Delta(), finish_reason="tool_calls")),
        chunk(usage=USAGE, agentrt=EXTENSION),
    ]
    return b"".join(b"data: " + encoder.encode(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


class _Body(httpx.AsyncByteStream):
    """A reply body read as a stream (the client reads every reply so)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


class _Daemon:
    """An httpx transport that reads requests as the daemon does and answers
    with the daemon's reply types."""

    def __init__(self, reply: bytes, *, stream: bool = False) -> None:
        self.reply = reply
        self.content_type = "text/event-stream" if stream else "application/json"
        self.bodies: list[bytes] = []
        self.requests: list[ChatCompletionRequest] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        self.requests.append(decode_request(request.content))  # raises on any refusal
        headers = {"content-type": self.content_type}
        return httpx.Response(200, stream=_Body(self.reply), headers=headers)


def _backend(daemon: _Daemon) -> OpenAIBackend:
    config = OpenAIBackendConfig(base_url="http://daemon.test/v1", models=["m"])
    return OpenAIBackend(config, transport=httpx.MockTransport(daemon))


def _check_request(chat: ChatCompletionRequest, *, stream: bool) -> None:
    """``REQUEST`` as the daemon decoded it: every field the client sent."""
    assert chat.model == "m"
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "tool"]
    system, user, assistant, tool = chat.messages
    assert (system.content, user.content, user.name) == ("be brief", "find the wire", "ada")
    assert assistant.content is None
    assert assistant.tool_calls is not None
    [call] = assistant.tool_calls
    assert call.function is not None
    assert (call.id, call.type) == ("call_1", "function")
    assert (call.function.name, call.function.arguments) == ("search", '{"q": "wire"}')
    assert (tool.content, tool.tool_call_id) == ("found: runtime/wire", "call_1")
    assert chat.tools is not None
    defined = [t.function for t in chat.tools]
    assert [t.type for t in chat.tools] == ["function", "function"]
    assert [(f.name, f.description, f.parameters) for f in defined if f is not None] == [
        (t.name, t.description, t.parameters) for t in TOOLS
    ]
    assert chat.tool_choice == "required"
    assert (chat.temperature, chat.top_p, chat.max_tokens) == (0.3, 0.9, 64)
    assert (chat.stop, chat.seed, chat.n) == (["END"], 7, None)
    assert (chat.logprobs, chat.top_logprobs) == (True, 2)
    assert chat.stream is (True if stream else None)
    if stream:
        assert chat.stream_options is not None
        assert chat.stream_options.include_usage is True
    else:
        assert chat.stream_options is None


async def test_a_client_request_decodes_on_the_daemon_and_a_daemon_reply_on_the_client() -> None:
    reply = _daemon_completion("hi", [ToolCallOut(id="call_9", function=FunctionCallOut(
        name="search", arguments='{"q": 1}'))])  # fmt: skip
    daemon = _Daemon(encoder.encode(reply))
    async with _backend(daemon) as backend:
        answer = await backend.complete(REQUEST)
        again = await backend.complete(REQUEST)  # the second from EncodedParts' cache
    assert daemon.bodies[0] == daemon.bodies[1]
    _check_request(daemon.requests[0], stream=False)
    [choice] = answer.choices
    assert choice.message.content == "hi"
    assert choice.message.tool_calls == [
        ToolCall(id="call_9", function=FunctionCall(name="search", arguments='{"q": 1}'))
    ]
    assert choice.finish_reason == "tool_calls"
    assert choice.logprobs is not None
    assert [
        (t.token, t.logprob, [(a.token, a.logprob) for a in t.top]) for t in choice.logprobs
    ] == [("hi", -0.5, [("hi", -0.5)])]
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) == (11, 3, 5)
    assert answer.model == "m"
    assert again.choices == answer.choices


async def test_a_streamed_request_and_the_daemons_stream_round_trip() -> None:
    daemon = _Daemon(_daemon_stream(), stream=True)
    async with _backend(daemon) as backend:
        deltas = [d async for d in backend.stream(REQUEST)]
    _check_request(daemon.requests[0], stream=True)
    final = deltas[-1].reply
    assert final is not None
    [choice] = final.choices
    assert choice.message.content == "hi"
    assert choice.message.tool_calls == [
        ToolCall(id="call_9", function=FunctionCall(name="search", arguments='{"q": 1}'))
    ]
    assert choice.finish_reason == "tool_calls"
    assert (final.usage.prompt_tokens, final.usage.cached_prompt_tokens) == (11, 5)


async def test_the_sim_server_reads_the_clients_request_back_exactly() -> None:
    """The sim-server decodes with the very type the client encodes with."""
    for stream in (False, True):
        reply = _daemon_stream() if stream else encoder.encode(_daemon_completion("hi", None))
        daemon = _Daemon(reply, stream=stream)
        async with _backend(daemon) as backend:
            if stream:
                [_ async for _ in backend.stream(REQUEST)]
            else:
                await backend.complete(REQUEST)
        body = daemon.bodies[0]
        read = raw_chat_decoder.decode(body)
        assert encoder.encode(read) == body
        assert read.tool_choice_name() == "required"
        assert read.stream is stream


def test_the_model_list_the_daemon_writes_is_the_one_the_client_reads() -> None:
    listing = ModelList(data=[ModelCard(id="a", created=1), ModelCard(id="b", created=2)])
    assert [
        m.id for m in msgspec.json.decode(encoder.encode(listing), type=ReplyModelList).data
    ] == [
        "a",
        "b",
    ]


# -- one definition ------------------------------------------------------------


def _classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]


def _package_sources() -> list[Path]:
    return sorted(p for top in PACKAGE for p in (ROOT / top).rglob("*.py")) + sorted(
        ROOT.glob("*.py")
    )


def test_the_wire_types_are_defined_in_the_wire_package_only() -> None:
    wire = {p: _classes(p) for p in WIRE.glob("*.py")}
    names = [n for found in wire.values() for n in found]
    assert {"RawChatRequest", "ChatCompletionRequest", "StreamOptions"} <= set(names)
    assert len(names) == len(set(names)), "a class name names two things in runtime/wire"
    elsewhere = {
        name: str(path.relative_to(ROOT))
        for path in _package_sources()
        if WIRE not in path.parents
        for name in _classes(path)
    }
    assert not {n: elsewhere[n] for n in names if n in elsewhere}
    # ... and the old spellings are gone for good.
    pattern = re.compile(r"^class (ChatRequest|StreamOptions|FunctionTool)\b", re.MULTILINE)
    for path in _package_sources():
        if WIRE not in path.parents:
            found = pattern.findall(path.read_text(encoding="utf-8"))
            if path != ROOT / "tools" / "_function.py":  # the public tool class
                assert not found, path


def test_the_wire_package_imports_only_protocols_msgspec_and_the_stdlib() -> None:
    for path in WIRE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                allowed = (
                    module.startswith(("agentrt.protocols", "agentrt.runtime.wire"))
                    or top == "msgspec"
                    or (top in sys.stdlib_module_names and top != "agentrt")
                    or module == "__future__"
                )
                assert allowed, f"{path.name} imports {module}"


def test_the_wire_package_init_is_a_docstring_only() -> None:
    body = ast.parse((WIRE / "__init__.py").read_text(encoding="utf-8")).body
    assert len(body) == 1
    assert isinstance(body[0], ast.Expr)
    assert isinstance(body[0].value, ast.Constant)
    assert isinstance(body[0].value.value, str)
