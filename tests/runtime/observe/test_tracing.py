"""OpenTelemetry traces of runs: one trace per run whose spans nest run >
rollout > step > model call / tool call and run > aggregation > judge,
with the GenAI semantic conventions; a receiver that is down costs a run
nothing (spans dropped and counted); tracing off imports nothing.  Read
back from a real OTLP receiver, Arize Phoenix, when it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ScalingSpec, ToolMessage
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.kernel._parent_death import guarded_argv
from agentrt.runtime.observe._tracing_config import TracingConfig, resolve_tracing
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedReply, ScriptedToolCall
from agentrt.tools.builtins._calculator import Calculator
from tests._support.needs import require
from tests._support.ports import free_port

pytestmark = pytest.mark.process

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from agentrt.runtime.observe._tracing import RunTracer  # noqa: E402

AGENTS = {"solver": {"name": "solver", "tools": ["calculator"]}}


def one_tool_then_42(request: ModelRequest) -> ReplySpec:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return ScriptedToolCall("calculator", {"expression": "6*7"})
    return ScriptedReply(content="42")


def _settings(endpoint: str, **changes: Any) -> Any:
    settings = resolve_tracing(TracingConfig(endpoint=endpoint, **changes), env={})
    assert settings is not None
    return settings


async def _traced_run(tracer: RunTracer, rollouts: int = 3) -> None:
    backend = ScriptedBackend(one_tool_then_42, models=["gpt-4o-mini"])
    async with Runtime({"agents": AGENTS}, backends=[backend], tools=[Calculator()]) as rt:
        rt.tracer = tracer
        result = await rt.run("6*7?", agent="solver", scaling=ScalingSpec(rollouts=rollouts))
    assert result.status == "succeeded"


def _by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


def _parent_name(span: ReadableSpan, index: dict[int, ReadableSpan]) -> str | None:
    return None if span.parent is None else index[span.parent.span_id].name


@pytest.mark.anyio
async def test_a_run_is_one_trace_nested_run_rollout_step_call() -> None:
    exporter = InMemorySpanExporter()
    tracer = RunTracer(_settings("http://127.0.0.1:9/v1/traces"), exporter=exporter)
    await _traced_run(tracer)
    tracer.close()
    spans = list(exporter.get_finished_spans())
    index = _by_id(spans)
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    names = sorted(s.name for s in spans)
    assert names.count("rollout solver") == 3
    assert names.count("chat gpt-4o-mini") == 6  # a tool call, then the answer, per rollout
    assert names.count("execute_tool calculator") == 3
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent solver"
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["agentrt.status"] == "succeeded"
    expected_parent = {
        "rollout solver": "invoke_agent solver",
        "step 0": "rollout solver",
        "step 1": "rollout solver",
        "chat gpt-4o-mini": "step",
        "execute_tool calculator": "step 0",
        "aggregate majority": "invoke_agent solver",
        "judge majority round 1": "aggregate majority",
    }
    for span in spans:
        if span is root:
            continue
        parent = _parent_name(span, index)
        assert parent is not None, span.name
        assert parent.startswith(expected_parent[span.name]), (span.name, parent)
        assert span.start_time is not None
        assert span.end_time is not None
        assert span.start_time <= span.end_time
    chat = next(s for s in spans if s.name.startswith("chat"))
    attrs = chat.attributes
    assert attrs is not None
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
    tokens_in, tokens_out = attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]
    assert isinstance(tokens_in, int)
    assert isinstance(tokens_out, int)
    assert tokens_in > 0
    assert tokens_out > 0
    assert "agentrt.latency_s" in attrs
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tracer.dropped == 0


def judged_or_42(request: ModelRequest) -> ReplySpec:
    text = str(request.messages[-1].content or "")
    if "Attempt" in text or "attempt" in text:  # a judge of the tournament
        return ScriptedReply(content="The first attempt is right.\nVERDICT: 1")
    if "Summarize" in text or "summar" in text.lower():  # a model summary
        return ScriptedReply(content='{"answer": "42", "confidence": 0.9}')
    return one_tool_then_42(request)


@pytest.mark.anyio
async def test_every_model_call_has_a_span_summaries_and_judges_too() -> None:
    exporter = InMemorySpanExporter()
    tracer = RunTracer(_settings("http://127.0.0.1:9/v1/traces"), exporter=exporter)
    backend = ScriptedBackend(judged_or_42, models=["gpt-4o-mini"])
    config = {"agents": AGENTS, "summarizer": "model"}
    async with Runtime(config, backends=[backend], tools=[Calculator()]) as rt:
        rt.tracer = tracer
        options = {"skip_agreeing": False}
        result = await rt.run(
            "6*7?",
            agent="solver",
            scaling=ScalingSpec(rollouts=4, aggregate="rtv", options=options),
        )
    tracer.close()
    assert result.status == "succeeded"
    spans = list(exporter.get_finished_spans())
    index = _by_id(spans)
    chats = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert len(chats) == len(backend.requests) == result.cost.model_calls
    parents = [_parent_name(s, index) or "" for s in chats]
    assert sum(1 for p in parents if p.startswith("step ")) == 8
    assert parents.count("invoke_agent solver") == 4  # a summary per rollout
    judged = parents.count("aggregate rtv")
    assert judged >= 3  # a judge call per comparison at least
    for span in chats:
        attrs = span.attributes
        assert attrs is not None
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
        assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
        assert attrs["gen_ai.usage.input_tokens"] > 0
    purposes = sorted(str((s.attributes or {}).get("agentrt.purpose", "step")) for s in chats)
    assert purposes.count("aggregation") == judged
    assert purposes.count("summary") == 4


@pytest.mark.anyio
async def test_sampled_out_runs_record_nothing() -> None:
    exporter = InMemorySpanExporter()
    tracer = RunTracer(_settings("http://127.0.0.1:9", sample_ratio=0.0), exporter=exporter)
    await _traced_run(tracer, rollouts=2)
    tracer.close()
    assert exporter.get_finished_spans() == ()


@pytest.mark.anyio
async def test_a_receiver_that_is_down_drops_and_counts_spans_without_holding_the_run() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    backend = ScriptedBackend(one_tool_then_42, models=["m"])
    config = {"agents": AGENTS, "tracing": {"endpoint": dead, "export_timeout_s": 0.5}}
    started = time.perf_counter()
    async with Runtime(config, backends=[backend], tools=[Calculator()]) as rt:
        tracer = rt.tracer
        assert tracer is not None
        result = await rt.run("6*7?", agent="solver", scaling=ScalingSpec(rollouts=4))
        ran = time.perf_counter() - started
    closed = time.perf_counter() - started
    assert result.status == "succeeded"
    assert result.answer == "42"
    assert tracer.queue.exported == 0
    assert tracer.dropped > 0  # every span of the run: none reached the receiver
    assert ran < 10  # spans are queued; the run never waits on the exporter
    assert closed - ran < 5  # the last flush gives up after about export_timeout_s


@pytest.mark.anyio
async def test_a_full_queue_drops_new_spans_and_counts_them() -> None:
    class Stuck(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:
            time.sleep(0.3)  # a receiver slower than the run
            return super().export(spans)

    exporter = Stuck()
    tracer = RunTracer(_settings("http://127.0.0.1:9", max_queue_spans=5), exporter=exporter)
    await _traced_run(tracer, rollouts=4)
    tracer.close()
    delivered = len(exporter.get_finished_spans())
    assert tracer.dropped > 0
    assert delivered + tracer.dropped == 4 * 6 + 1 + 2  # rollouts' spans, the run, aggregation


def test_settings_come_from_the_file_then_the_otel_variables() -> None:
    assert resolve_tracing(TracingConfig(), env={}) is None
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_SERVICE_NAME": "svc",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc",
    }
    from_env = resolve_tracing(TracingConfig(), env=env)
    assert from_env is not None
    assert from_env.endpoint == "http://collector:4318/v1/traces"
    assert (from_env.service_name, from_env.sample_ratio) == ("svc", 0.25)
    assert from_env.headers == {"api-key": "abc"}
    file = TracingConfig(endpoint="http://x:1/custom", service_name="mine", sample_ratio=1.0)
    merged = resolve_tracing(file, env=env)
    assert merged is not None
    assert (merged.endpoint, merged.service_name, merged.sample_ratio) == (
        "http://x:1/custom",
        "mine",
        1.0,
    )
    assert resolve_tracing(TracingConfig(enabled=False), env=env) is None
    assert resolve_tracing(TracingConfig(), env={**env, "OTEL_SDK_DISABLED": "true"}) is None
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        resolve_tracing(TracingConfig(), env={**env, "OTEL_TRACES_SAMPLER_ARG": "lots"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        resolve_tracing(TracingConfig(), env={**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(ConfigError, match=r"tracing\.endpoint"):
        resolve_tracing(TracingConfig(endpoint="ftp://x"), env={})
    with pytest.raises(ConfigError, match=r"tracing\.enabled"):
        resolve_tracing(TracingConfig(enabled=True), env={})


def test_with_tracing_off_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, anyio\n"
        "from agentrt import Runtime\n"
        "from agentrt.testing import ScriptedBackend\n"
        "async def main():\n"
        "    async with Runtime(backends=[ScriptedBackend(['42'])]) as rt:\n"
        "        assert rt.tracer is None\n"
        "        assert (await rt.run('hi')).answer == '42'\n"
        "anyio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stderr


# -- a real OTLP receiver: Arize Phoenix --------------------------------------------


def _phoenix_command() -> str | None:
    given = os.environ.get("AGENTRT_PHOENIX")
    if given:
        return given
    cached = Path.home() / ".cache" / "agentrt" / "phoenix-venv" / "bin" / "phoenix"
    return str(cached) if cached.exists() else shutil.which("phoenix")


def _phoenix_template(command: str) -> Path | None:
    """Where a freshly migrated, empty Phoenix database is kept for this
    Phoenix version (``~/.cache/agentrt/phoenix-db/<version>``), or None
    when the version cannot be told (then every start migrates)."""
    venv = Path(command).resolve().parents[1]
    found = sorted(venv.glob("lib/python*/site-packages/arize_phoenix-*.dist-info"))
    if not found:
        return None
    return Path.home() / ".cache" / "agentrt" / "phoenix-db" / found[-1].name / "phoenix.db"


def _serve_phoenix(command: str, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``phoenix serve`` on free loopback ports with ``home`` as its working
    directory, once it answers ``/healthz``; its process and URL."""
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(home),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
    }
    with (home / "phoenix.log").open("a") as log:
        proc = subprocess.Popen(
            guarded_argv([command, "serve"], grace_s=10),  # gone with pytest, even SIGKILLed
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (home / "phoenix.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Phoenix was not up in 120 s"
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    except BaseException:
        _stop_phoenix(proc)
        raise


def _stop_phoenix(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``phoenix serve`` on free loopback ports (its own SQLite store);
    skips (or fails under AGENTRT_REQUIRE_PHOENIX=1) when Phoenix is absent.

    Its store starts as a copy of an empty database this Phoenix version
    migrated once (made by a first start and a clean stop, then kept):
    the migrations are half of a start's CPU."""
    command = _phoenix_command()
    require(
        command is not None,
        "AGENTRT_REQUIRE_PHOENIX",
        "needs Arize Phoenix (`phoenix serve`; .ci/run installs it)",
    )
    assert command is not None
    pytest.importorskip("phoenix.client")
    home = tmp_path_factory.mktemp("phoenix")
    template = _phoenix_template(command)
    if template is not None and template.is_file():
        shutil.copyfile(template, home / "phoenix.db")
    proc, url = _serve_phoenix(command, home)
    if template is not None and not template.is_file():
        _stop_phoenix(proc)  # migrated and still empty: keep a copy
        template.parent.mkdir(parents=True, exist_ok=True)
        partial = template.with_name(f"{template.name}.{os.getpid()}")
        shutil.copyfile(home / "phoenix.db", partial)
        partial.replace(template)
        proc, url = _serve_phoenix(command, home)
    try:
        yield url
    finally:
        _stop_phoenix(proc)


@pytest.mark.slow
@pytest.mark.timeout(300)  # Phoenix's first start migrates its database: up to a minute
@pytest.mark.anyio
async def test_phoenix_receives_a_tournament_as_one_trace(phoenix: str) -> None:
    from phoenix.client import Client

    def script(request: ModelRequest) -> ReplySpec:
        text = str(request.messages[-1].content or "")
        if "Attempt" in text or "attempt" in text:  # a judge of the tournament
            return ScriptedReply(content="The first attempt is right.\nWINNER: 1")
        return one_tool_then_42(request)

    backend = ScriptedBackend(script, models=["gpt-4o-mini"])
    config = {"agents": AGENTS, "tracing": {"endpoint": phoenix, "service_name": "agentrt-test"}}
    async with Runtime(config, backends=[backend], tools=[Calculator()]) as rt:
        tracer = rt.tracer
        assert tracer is not None
        # Judge the rollouts although they agree: the judges' calls get spans too.
        scaling = ScalingSpec(rollouts=4, aggregate="rtv", options={"skip_agreeing": False})
        result = await rt.run("6*7?", agent="solver", scaling=scaling)
    assert result.status == "succeeded"
    assert tracer.dropped == 0
    client = Client(base_url=phoenix)
    spans: list[Any] = []
    with anyio.fail_after(30):
        while len(spans) < tracer.queue.exported:  # Phoenix ingests asynchronously
            await anyio.sleep(0.2)
            every = client.spans.get_spans(project_identifier="default", limit=10_000)
            roots = [s for s in every if s["attributes"].get("agentrt.run_id") == result.run_id]
            trace = {s["context"]["trace_id"] for s in roots}
            spans = [s for s in every if s["context"]["trace_id"] in trace]
    assert len(spans) == tracer.queue.exported  # the whole run is this one trace
    by_id = {s["context"]["span_id"]: s for s in spans}
    (root,) = [s for s in spans if not s.get("parent_id")]
    assert root["name"] == "invoke_agent solver"

    def parent(span: Any) -> str:
        return str(by_id[span["parent_id"]]["name"])

    rollouts = [s for s in spans if s["name"] == "rollout solver"]
    assert len(rollouts) == 4
    assert {parent(s) for s in rollouts} == {"invoke_agent solver"}
    judges = [s for s in spans if s["name"].startswith("judge rtv")]
    assert judges
    assert {parent(s) for s in judges} == {"aggregate rtv"}
    # One model-call span per call the model saw: the steps', the judges'.
    chats = [s for s in spans if s["name"] == "chat gpt-4o-mini"]
    assert len(chats) == len(backend.requests)
    assert sum(1 for s in chats if parent(s).startswith("step ")) == 8
    assert {parent(s) for s in chats if not parent(s).startswith("step ")} == {"aggregate rtv"}
    usage = chats[0]["attributes"]
    assert usage["gen_ai.request.model"] == "gpt-4o-mini"
    assert usage["gen_ai.usage.input_tokens"] > 0
    assert usage["gen_ai.operation.name"] == "chat"
    tools = [s for s in spans if s["name"] == "execute_tool calculator"]
    assert len(tools) == 4
    assert {parent(s) for s in tools} == {"step 0"}


def test_the_configuration_docs_describe_every_tracing_key_and_their_example_loads() -> None:
    import re
    import tomllib

    from agentrt.runtime.config._config_file import config_from_mapping

    doc = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    for key in TracingConfig.model_fields:
        assert f"`{key}`" in doc, f"docs/configuration.md: tracing.{key}"
    blocks = re.findall(r"```toml\n(\[(?:tracing|prices)[^`]*)```", doc)
    assert len(blocks) == 2
    config = config_from_mapping(tomllib.loads("\n".join(blocks)), source="docs")
    assert config.runtime.tracing.sample_ratio == 0.1
    assert "Qwen/Qwen3-8B" in config.runtime.prices
