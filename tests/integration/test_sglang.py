"""agentrt against a real SGLang server (its CPU engine; ``sglang_server`` in
conftest.py serves SmolLM2-135M-Instruct as ``smol``), through both
backends -- ``kind = "sglang"`` (native ``/generate``) and ``kind =
"openai"`` (its OpenAI-compatible API) -- and through the engine.

The server decodes about 17 tokens a second here: few tests, few tokens.
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx
import pytest

from agentrt import Runtime
from agentrt.agents import EventLog
from agentrt.protocols import (
    ModelReply,
    ModelRequest,
    RunOptions,
    SamplingParams,
    StepRecorded,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.cli._main import main
from agentrt.runtime.kernel._errors import BackendUnavailable, UnknownModelError
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend, SGLangBackendConfig
from agentrt.runtime.models.sglang._sglang_wire import build_payload

from .conftest import calibrated_chars_per_token

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.slow,
    pytest.mark.anyio,
    # The first test also pays for starting the server (about 40 s idle, more when busy).
    pytest.mark.timeout(900),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sglang_gpu.toml"
_METRIC = re.compile(r"^(sglang:[a-z_]+)(?:\{[^}]*\})?\s+(\S+)$", re.MULTILINE)


class SGLangServer(Protocol):
    """What the ``sglang_server`` fixture (conftest.py) provides."""

    base_url: str
    model: str
    model_path: str
    output: Callable[[], tuple[str, ...]]


def _native(server: SGLangServer, **options: Any) -> SGLangBackend:
    config = {"name": "sg", "urls": [server.base_url], "health_interval_s": 0, **options}
    return SGLangBackend(SGLangBackendConfig.model_validate(config))


def _openai(server: SGLangServer, model: str | None = None) -> OpenAIBackend:
    config = OpenAIBackendConfig(
        name="sgoai", base_url=server.base_url + "/v1", models=[model or server.model]
    )
    return OpenAIBackend(config)


@pytest.fixture(params=["sglang", "openai"])
async def backend(
    request: pytest.FixtureRequest, sglang_server: SGLangServer
) -> AsyncIterator[SGLangBackend | OpenAIBackend]:
    if request.param == "sglang":
        # No model configured: the backend asks the server for the name it serves.
        async with _native(sglang_server) as native:
            yield native
    else:
        async with _openai(sglang_server) as oai:
            yield oai


async def _metrics(server: SGLangServer) -> dict[str, float]:
    """SGLang's Prometheus samples by name (summed over labels)."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        response = await client.get("/metrics")
    response.raise_for_status()
    found: dict[str, float] = {}
    for name, value in _METRIC.findall(response.text):
        found[name] = found.get(name, 0.0) + float(value)
    return found


async def _until(
    server: SGLangServer, check: Callable[[dict[str, float]], bool], timeout_s: float = 60
) -> dict[str, float]:
    """The server's metrics once ``check`` holds for them (polled)."""
    with anyio.fail_after(timeout_s):
        while not check(found := await _metrics(server)):  # noqa: ASYNC110 - the server's view
            await anyio.sleep(0.2)
    return found


def _abort_posts(server: SGLangServer) -> int:
    """``POST /abort_request`` lines in the server's recent output."""
    return sum("POST /abort_request" in line for line in server.output())


def _ask(text: str, **fields: Any) -> ModelRequest:
    sampling = fields.pop("sampling", SamplingParams(temperature=0.0, max_tokens=12))
    return ModelRequest(messages=[UserMessage(content=text)], sampling=sampling, **fields)


async def _streamed(
    backend: SGLangBackend | OpenAIBackend, request: ModelRequest
) -> tuple[list[str], ModelReply]:
    pieces: list[str] = []
    reply: ModelReply | None = None
    async with aclosing(backend.stream(request)) as stream:
        async for delta in stream:
            assert isinstance(delta, StreamDelta)
            if delta.content:
                pieces.append(delta.content)
            if delta.reply is not None:
                reply = delta.reply
    assert reply is not None
    return pieces, reply


async def test_completion_stream_logprobs_n_and_stop(
    backend: SGLangBackend | OpenAIBackend, sglang_server: SGLangServer
) -> None:
    assert backend.models == [sglang_server.model]  # the served name, not the model's path
    request = _ask("Name three colours.", logprobs=True, request_id=uuid.uuid4().hex)
    whole = await backend.complete(request)
    [choice] = whole.choices
    text = choice.message.content or ""
    assert text
    assert whole.model == sglang_server.model
    assert whole.usage.prompt_tokens > 0
    # One logprob per generated token.
    assert choice.logprobs is not None
    assert whole.usage.completion_tokens == len(choice.logprobs)
    assert 1 <= whole.usage.completion_tokens <= 12

    # Streaming, greedy: the same text, in pieces, and the same usage.
    pieces, streamed = await _streamed(backend, _ask("Name three colours."))
    assert len(pieces) >= 2
    assert "".join(pieces) == streamed.message.content == text
    assert streamed.usage.completion_tokens == whole.usage.completion_tokens
    assert streamed.usage.prompt_tokens == whole.usage.prompt_tokens

    # A stop sequence from the middle of the greedy text ends the reply before it.
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    stopped = await backend.complete(
        _ask(
            "Name three colours.",
            sampling=SamplingParams(temperature=0.0, max_tokens=12, stop=[stop]),
        )
    )
    content = stopped.message.content or ""
    assert stop not in content
    assert text.startswith(content.rstrip())
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < whole.usage.completion_tokens

    # n > 1: n choices, the prompt counted once, completion tokens summed.
    sampled = await backend.complete(
        _ask(
            "Write one word.",
            n=2,
            logprobs=True,
            sampling=SamplingParams(temperature=1.0, max_tokens=6, seed=7),
        )
    )
    assert sorted(c.index for c in sampled.choices) == [0, 1]
    per_choice = [len(c.logprobs or []) for c in sampled.choices]
    assert all(1 <= n <= 6 for n in per_choice)
    assert sampled.usage.completion_tokens == sum(per_choice)


async def _give_up_on_a_call_and_a_stream(
    server: SGLangServer, temperature: float, call: tuple[str, int], stream: tuple[str, int]
) -> None:
    """Two long requests (2000 tokens at most) given up: the call (its
    request id, its samples) cancelled once the server runs all its samples,
    as the agent loop cancels one; the stream stopped after its first piece."""
    long = SamplingParams(temperature=temperature, max_tokens=2000)
    task = "Write a long story about the sea."
    (call_id, call_n), (stream_id, stream_n) = call, stream
    async with _native(server, model=server.model) as sg:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sg.complete, _ask(task, sampling=long, n=call_n, request_id=call_id))
            await _until(server, lambda m: m.get("sglang:num_running_reqs", 0) >= call_n)
            tg.cancel_scope.cancel()
        deltas = sg.stream(_ask(task, sampling=long, n=stream_n, request_id=stream_id))
        async with aclosing(deltas) as pieces:
            first = await anext(pieces)
        assert first.content


async def _aborted_early(server: SGLangServer, before: dict[str, float], aborts: int) -> None:
    """Wait until the server counts ``aborts`` more aborted requests than
    ``before`` and runs none; the calls (2000 tokens each at most) were
    stopped early: under 1000 tokens were generated in all."""
    aborted = before.get("sglang:num_aborted_requests_total", 0.0) + aborts
    after = await _until(
        server,
        lambda m: (
            m.get("sglang:num_aborted_requests_total", 0) >= aborted
            and m.get("sglang:num_running_reqs", 0) == 0
        ),
    )
    generated = after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"]
    assert generated < 1000


async def test_a_cancelled_call_is_aborted_at_the_server(sglang_server: SGLangServer) -> None:
    """The engine gives up on a call (early stop, a deadline, a cancelled
    run): the server stops generating it (``POST /abort_request``:
    ``sglang:num_aborted_requests_total``, nothing left running) instead
    of running on to ``max_tokens``."""
    before = await _metrics(sglang_server)
    posted = _abort_posts(sglang_server)
    await _give_up_on_a_call_and_a_stream(sglang_server, 0.0, ("cancel-1", 1), ("cancel-2", 1))
    await _aborted_early(sglang_server, before, 2)
    # SGLang also aborts a request whose client went away, once it notices;
    # the server's access log shows agentrt asked at once.
    if sglang_server.output():  # a server this session started
        assert _abort_posts(sglang_server) >= posted + 2


async def test_every_sample_of_an_n_gt_1_call_is_aborted_at_the_server(
    sglang_server: SGLangServer,
) -> None:
    """For its own ``n > 1`` SGLang draws a random id per sample, which no
    client can abort; agentrt sends the samples as a batch under ids it
    names (``{rid}_{i}``: the server's replies carry them) and, when it
    gives up on the call, aborts each: one ``POST /abort_request`` per
    sample in the server's log, its aborted-requests counter up by as many,
    nothing left running."""
    short = _ask(
        "Say hi.",
        n=2,
        request_id="ids",
        sampling=SamplingParams(temperature=1.0, max_tokens=2),
    )
    async with httpx.AsyncClient(base_url=sglang_server.base_url, timeout=120) as client:
        reply = await client.post("/generate", json=build_payload(short))
    reply.raise_for_status()
    assert [sample["meta_info"]["id"] for sample in reply.json()] == ["ids_0", "ids_1"]

    before = await _metrics(sglang_server)
    posted = _abort_posts(sglang_server)
    await _give_up_on_a_call_and_a_stream(sglang_server, 1.0, ("cancel-n3", 3), ("cancel-n2", 2))
    await _aborted_early(sglang_server, before, 3 + 2)
    if sglang_server.output():  # a server this session started: its access log
        assert _abort_posts(sglang_server) == posted + 3 + 2


async def test_the_servers_tokenizer_calibrates_the_context_budget(
    sglang_server: SGLangServer,
) -> None:
    expected = await calibrated_chars_per_token(sglang_server.base_url, sglang_server.model)
    backends = {"sg": {"kind": "sglang", "urls": [sglang_server.base_url]}}
    async with Runtime({"models": {"backends": backends}, "warm_prefix": False}) as rt:
        ratio = rt.chars_per_token[sglang_server.model]
    assert ratio == pytest.approx(expected, abs=1e-3)


def test_the_gpu_example_runs_four_rollouts_and_reports_cached_tokens(
    sglang_server: SGLangServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``examples/sglang_gpu.toml`` as written, its URLs and model name
    pointed at this server: 4 rollouts through ``kind = "sglang"`` reuse
    the prompt from SGLang's prefix cache, and the run says so beside its
    cost; ``--model coder-openai`` goes to the other backend, though both
    serve the same model name."""
    text = EXAMPLE.read_text()
    text = text.replace(
        '["http://gpu1:30000", "http://gpu2:30000"]', f'["{sglang_server.base_url}"]'
    )
    text = text.replace('"http://gpu1:30000/v1"', f'"{sglang_server.base_url}/v1"')
    text = text.replace('models = ["coder"]', f'models = ["{sglang_server.model}"]')
    config = tmp_path / "sglang.toml"
    config.write_text(text)
    argv = ["run", "Say hi.", "--config", str(config), "--max-steps", "1", "--max-tokens", "4"]
    assert main([*argv, "--rollouts", "4"]) == 0
    out = capsys.readouterr().out
    usage = re.search(r"usage: (\d+) prompt \((\d+) cached\) \+ (\d+) completion", out)
    assert usage is not None, out
    prompt, cached = int(usage[1]), int(usage[2])
    # Four rollouts of one prompt after the example's warm-up: they found it
    # in the cache (without the warm-up, whether they do is a race).
    assert cached >= 3 * (prompt // 4) * 0.9
    assert "backend coder-openai" not in out

    # The other backend, by name, though both serve the model name.
    assert main([*argv, "--model", "coder-openai", "--json"]) == 0
    assert '"status":"succeeded"' in capsys.readouterr().out.replace(" ", "")
    # The model name alone is ambiguous: an error naming both backends.
    assert main([*argv, "--model", sglang_server.model]) == 2
    err = capsys.readouterr().err
    assert "'coder' and 'coder-openai'" in err


async def test_bad_input_gets_one_clear_error_before_the_first_step(
    sglang_server: SGLangServer,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    wrong_url = {"sg": {"kind": "sglang", "urls": [dead]}}
    with pytest.raises(BackendUnavailable, match=r"no replica answers /health: .*cannot connect"):
        async with Runtime({"models": {"backends": wrong_url}}):
            pass
    not_served = {"sg": {"kind": "sglang", "urls": [sglang_server.base_url], "model": "gpt-9"}}
    with pytest.raises(
        UnknownModelError, match=rf"configured for model 'gpt-9'.*serves '{sglang_server.model}'"
    ):
        async with Runtime({"models": {"backends": not_served}}):
            pass


async def test_a_required_tool_call_runs_end_to_end_on_the_native_api(
    sglang_server: SGLangServer,
) -> None:
    """SmolLM2 calls no tool by itself: a required client tool makes the
    native backend end the prompt with ``<tool_call>`` and hold the rest to
    the tool's call JSON (SGLang's ``json_schema`` constrained decoding);
    agentrt parses the text into a tool call, and the run ends with it for
    the client to run (``tool_choice`` governs the client's tools)."""
    backends = {"sg": {"kind": "sglang", "urls": [sglang_server.base_url]}}
    agent = {
        "name": "calc",
        "temperature": 0.0,
        "limits": {"max_steps": 1, "max_tokens_per_step": 40},
    }
    config = {"models": {"backends": backends}, "agents": {"calc": agent}, "warm_prefix": False}
    calculator = ToolSpec(
        name="calculator",
        description="Evaluate an arithmetic expression",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
    log = EventLog()
    async with Runtime(config) as rt:
        result = await rt.run(
            "What is 17 * 23?",
            agent="calc",
            events=log,
            options=RunOptions(client_tools=[calculator], tool_choice="required"),
        )
    assert result.status == "succeeded", result.error
    (call,) = json.loads(result.answer or "")
    assert call["name"] == "calculator"
    assert isinstance(json.loads(call["arguments"])["expression"], str)
    [step] = [e.step for e in log.of_type(StepRecorded)]
    assert step.reply is not None
    assert [c.function.name for c in step.reply.message.tool_calls] == ["calculator"]
    assert result.cost.model_calls == 1
