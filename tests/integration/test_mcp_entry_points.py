"""One MCP-using agent hierarchy through every entry point: ``Runtime``, the
CLI, the daemon's REST API, its OpenAI endpoint and its ``/mcp``.

The hierarchy is ``examples/mcp_hierarchy.yaml``: a lead that reads a file
through ``server-filesystem`` and delegates the sum to an ``adder``
sub-agent, which adds through ``server-everything``; both servers come from
the configuration's ``[mcp]`` (one ``agentrt.toml`` for every entry point).
A scripted model reads the file name from the task, the numbers from the
file's content and the answer from the sum, so a right answer means every
tool result reached the model.  A ``Runtime`` (and so a daemon) runs one
process per MCP server, shared by concurrent runs; a server killed with
SIGKILL is restarted by its actor, and the next run's calls succeed.

Needs ``npx``: without it the tests skip, unless ``AGENTRT_REQUIRE_NPX=1``
(CI sets it), which makes them fail instead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, final

import anyio
import httpx
import mcp_types
import openai
import psutil
import pytest
from mcp import Client

from agentrt import Runtime
from agentrt.agents import load_spec
from agentrt.protocols import (
    ModelReply,
    ModelRequest,
    RunResult,
    TextPart,
    ToolMessage,
    UserMessage,
    decode,
)
from agentrt.runtime.cli._main import main
from agentrt.runtime.config._config_file import load_config
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.testing import (
    ReplySpec,
    ScriptedBackend,
    ScriptedToolCall,
    SimServerConfig,
    start_sim_server_process,
)
from agentrt.tools.mcp._server_actor import McpServerStatus
from agentrt.tools.mcp._server_health import ConnectionState
from tests._support.backends import ForwardingBackend
from tests._support.daemon import serving_manager
from tests._support.logs import warnings_logged

pytestmark = [pytest.mark.slow, pytest.mark.process]

EXAMPLE: Final = Path(__file__).resolve().parents[2] / "examples" / "mcp_hierarchy.yaml"
EVERYTHING: Final = "@modelcontextprotocol/server-everything@2026.8.31"
FILESYSTEM: Final = "@modelcontextprotocol/server-filesystem@2026.8.31"
#: The executable each server runs as (npx -> sh -> node <bin>), by server name.
SERVER_BINS: Final = {"files": "mcp-server-filesystem", "everything": "mcp-server-everything"}

#: The files two concurrent runs read, and the numbers in each.
FILES: Final = {"a.txt": (17, 25), "b.txt": (100, 23)}
ANSWERS: Final = {name: str(a + b) for name, (a, b) in FILES.items()}

_FILE_NAME = re.compile(r"\b[\w-]+\.txt\b")
_NUMBER = re.compile(r"-?\d+")
_SUM = re.compile(r"^The sum of (-?\d+) and (-?\d+) is (-?\d+)\.$")


def task_for(name: str) -> str:
    return f"What is the sum of the two numbers in {name}?"


# -- the scripted model ----------------------------------------------------------------


def _text(message: UserMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def _offers(request: ModelRequest, tool: str) -> bool:
    return any(t.name == tool for t in request.tools)


def _results(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, ToolMessage)]


def _task(request: ModelRequest) -> str:
    return next(_text(m) for m in request.messages if isinstance(m, UserMessage))


def is_leads_first_call(request: ModelRequest) -> bool:
    return _offers(request, "files__read_text_file") and not _results(request)


def script(request: ModelRequest) -> ReplySpec:
    """The lead reads the file the task names and hands its two numbers to
    the adder, then answers with the adder's answer; the adder calls
    ``get-sum`` and answers with the sum.  A tool result it cannot read
    becomes the answer, so a failure shows in the run's answer."""
    results = _results(request)
    if _offers(request, "everything__get-sum"):  # the adder
        if not results:
            a, b = (int(n) for n in _NUMBER.findall(_task(request))[:2])
            return ScriptedToolCall("everything__get-sum", {"a": a, "b": b})
        found = _SUM.match(results[-1])
        return found.group(3) if found else f"unexpected get-sum result: {results[-1]!r}"
    if not results:  # the lead
        found_name = _FILE_NAME.search(_task(request))
        assert found_name is not None, _task(request)
        return ScriptedToolCall("files__read_text_file", {"path": found_name.group()})
    if len(results) == 1:
        numbers = _NUMBER.findall(results[0])
        if len(numbers) != 2:
            return f"unexpected file content: {results[0]!r}"
        return ScriptedToolCall("adder", {"task": f"Add {numbers[0]} and {numbers[1]}."})
    return results[-1].split("\n\n", 1)[0]  # the adder's answer, without its account


def assert_tool_results_reached_the_model(requests: list[ModelRequest], names: list[str]) -> None:
    """Each file's content reached the lead, and its sum the adder."""
    lead_saw = {r for q in requests if _offers(q, "files__read_text_file") for r in _results(q)}
    adder_saw = {r for q in requests if _offers(q, "everything__get-sum") for r in _results(q)}
    for name in names:
        a, b = FILES[name]
        assert f"{a} {b}\n" in lead_saw, lead_saw
        assert f"The sum of {a} and {b} is {a + b}." in adder_saw, adder_saw


@final
class Gate:
    """Holds every run's first model call until ``expected`` runs wait
    there, and then until ``open()``: the runs are in flight together while
    the test looks at the server processes."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.all_waiting = anyio.Event()
        self._opened = anyio.Event()

    async def wait(self) -> None:
        self.waiting += 1
        if self.waiting == self.expected:
            self.all_waiting.set()
        await self._opened.wait()

    def open(self) -> None:
        self._opened.set()


@final
class GatedBackend(ForwardingBackend[ScriptedBackend]):
    """The scripted backend, with the lead's first call of a run held at
    ``gate`` when one is set."""

    def __init__(self) -> None:
        super().__init__(ScriptedBackend(script))
        self.gate: Gate | None = None

    @property
    def max_concurrency(self) -> None:
        return None

    @property
    def requests(self) -> list[ModelRequest]:
        return self.inner.requests

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.gate is not None and is_leads_first_call(request):
            await self.gate.wait()
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        # The daemon streams a new run's first seconds (for a web page that
        # follows it right after posting): gated the same way.
        if self.gate is not None and is_leads_first_call(request):
            await self.gate.wait()
        async for delta in self.inner.stream(request):
            yield delta


async def two_runs_at_once(
    backend: GatedBackend, run: Callable[[str], Awaitable[str]]
) -> tuple[dict[str, str], dict[str, list[int]]]:
    """``run`` (a task's answer through some entry point) for each file at
    once; returns the answers and the server processes seen while both
    runs were in flight."""
    gate = backend.gate = Gate(len(FILES))
    answers: dict[str, str] = {}

    async def one(name: str) -> None:
        answers[name] = await run(name)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for name in FILES:
                tg.start_soon(one, name)
            await gate.all_waiting.wait()
            seen = server_processes()
            gate.open()
    backend.gate = None
    return answers, seen


# -- server processes -------------------------------------------------------------------


def server_processes() -> dict[str, list[int]]:
    """The pids of the MCP server processes this process started (the node
    process running each server's executable), by server name."""
    found: dict[str, list[int]] = {server: [] for server in SERVER_BINS}
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            command = process.cmdline()
        except psutil.Error:
            continue
        if len(command) < 2 or not Path(command[0]).name.startswith("node"):
            continue
        for server, executable in SERVER_BINS.items():
            if Path(command[1]).name == executable:
                found[server].append(process.pid)
    return found


def one_process_each() -> dict[str, int]:
    seen = server_processes()
    assert all(len(pids) == 1 for pids in seen.values()), seen
    return {server: pids[0] for server, pids in seen.items()}


async def assert_runs_share_one_process_per_server(
    backend: GatedBackend, run: Callable[[str], Awaitable[str]]
) -> None:
    """Two runs at once through ``run`` answer right, and while both were in
    flight each server had one process: the one it had before, and still has."""
    started = one_process_each()
    answers, during = await two_runs_at_once(backend, run)
    assert one_process_each() == started
    assert answers == ANSWERS
    assert during == {server: [pid] for server, pid in started.items()}


@pytest.fixture(autouse=True)
def no_server_left_behind() -> Iterator[None]:
    """Whoever started the servers stopped them when it closed."""
    left_over = server_processes()
    assert left_over == {server: [] for server in SERVER_BINS}, f"from an earlier test: {left_over}"
    yield
    deadline = time.monotonic() + 10
    while any(server_processes().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_processes() == {server: [] for server in SERVER_BINS}


async def kill_everything_and_wait_for_its_restart(rt: Runtime) -> McpServerStatus:
    """SIGKILL the server-everything process, then wait until its actor
    reports a new connection (the connection's own restart, not the actor's)."""
    os.kill(one_process_each()["everything"], signal.SIGKILL)
    with anyio.fail_after(30):
        while True:
            status = (await rt.mcp_status())["everything"]
            if status.restarts >= 1 and status.state is ConnectionState.READY:
                return status
            await anyio.sleep(0.05)


# -- the configuration ---------------------------------------------------------------------


@pytest.fixture
def config_file(npx: str, tmp_path: Path) -> Callable[[str], Path]:
    """``config_file(extra)``: an ``agentrt.toml`` with the hierarchy as
    ``lead`` and its two MCP servers, plus ``extra`` sections; the files
    server may read ``tmp_path/root``, which holds ``FILES``."""
    root = tmp_path / "root"
    root.mkdir()
    for name, (a, b) in FILES.items():
        (root / name).write_text(f"{a} {b}\n")

    def write(extra: str) -> Path:
        path = tmp_path / "agentrt.toml"
        path.write_text(
            f"[agents]\nlead = {json.dumps(str(EXAMPLE))}\n\n"
            "[mcp.files]\n"
            f"command = {json.dumps(npx)}\n"
            f"args = {json.dumps(['-y', FILESYSTEM, str(root)])}\n\n"
            "[mcp.everything]\n"
            f"command = {json.dumps(npx)}\n"
            f"args = {json.dumps(['-y', EVERYTHING])}\n"
            "restart = {initial_delay_s = 0.1, jitter = 0.0}\n\n" + extra
        )
        return path

    return write


def test_the_example_names_the_configurations_servers() -> None:
    # The servers are examples/agentrt.toml's; the spec only picks their tools.
    servers = load_config(EXAMPLE.with_name("agentrt.toml")).runtime.mcp
    specs = load_spec(EXAMPLE, servers=servers)
    assert specs.root.name == "lead"
    assert specs.servers == {"files": servers["files"], "everything": servers["everything"]}


# -- Runtime ----------------------------------------------------------------------------------


@asynccontextmanager
async def lead_runtime(toml: Path) -> AsyncIterator[tuple[Runtime, GatedBackend]]:
    """A Runtime from ``toml`` on a ``GatedBackend``; entering, the block and
    closing have 60 seconds."""
    backend = GatedBackend()
    with anyio.fail_after(60):
        async with Runtime(load_config(toml).runtime, backends=[backend]) as rt:
            yield rt, backend


@pytest.mark.anyio
async def test_runtime_runs_share_one_process_per_server(
    config_file: Callable[[str], Path],
) -> None:
    async with lead_runtime(config_file("")) as (rt, backend):

        async def run(name: str) -> str:
            result = await rt.run(task_for(name), agent="lead")
            assert result.status == "succeeded", result.error
            return result.answer or ""

        await assert_runs_share_one_process_per_server(backend, run)
    assert_tool_results_reached_the_model(backend.requests, list(FILES))


@pytest.mark.anyio
async def test_runtime_restarts_a_killed_server_through_its_actor(
    config_file: Callable[[str], Path],
) -> None:
    async with lead_runtime(config_file("")) as (rt, backend):
        first = await rt.run(task_for("a.txt"), agent="lead")
        before = one_process_each()
        status = await kill_everything_and_wait_for_its_restart(rt)
        after = one_process_each()
        backend.requests.clear()
        second = await rt.run(task_for("b.txt"), agent="lead")
    assert (first.answer, second.answer) == (ANSWERS["a.txt"], ANSWERS["b.txt"])
    assert (status.restarts, status.actor_restarts) == (1, 0)
    assert after["everything"] != before["everything"]
    assert after["files"] == before["files"]  # the other server is untouched
    assert_tool_results_reached_the_model(backend.requests, ["b.txt"])


# -- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    with warnings_logged():
        yield


@pytest.mark.usefixtures("fresh_logging")
def test_cli_runs_the_hierarchy_on_a_model_server(
    config_file: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI builds its backends from the configuration, so the model is
    # the sim-server: offered tools, it makes two calls at once, cycling
    # through them, with "x" for strings and 1 for numbers; given their
    # results, it answers with filler words.
    (tmp_path / "root" / "x").write_text("5 7\n")
    sim = SimServerConfig(ttft_ms=0, token_ms=0, tool_rounds=1, parallel_tool_calls=2)
    process, url = start_sim_server_process(sim)
    with process:
        try:
            toml = config_file(
                "[models]\ndefault = 'sim'\n\n"
                f"[models.backends.sim]\nkind = 'openai'\nbase_url = '{url}/v1'\n"
                "models = ['sim']\n"
            )
            argv = ["run", task_for("x"), "--config", str(toml), "--json", "--no-progress"]
            lead_code = main([*argv, "--agent", "lead"])
            lead = decode(capsys.readouterr().out, RunResult)
            adder_code = main([*argv, "--agent", f"{EXAMPLE}#adder"])
            adder = decode(capsys.readouterr().out, RunResult)
        finally:
            process.terminate()
    assert (lead_code, lead.status) == (0, "succeeded"), lead.error
    [summary] = lead.summaries
    facts = [fact.claim for fact in summary.facts]
    # The lead read the file and called the adder, which called get-sum and finished.
    assert "5 7" in facts, facts
    [account] = [f for f in facts if "[adder:" in f]
    assert "[adder: finished after 2 steps; tool calls: everything__get-sum x2;" in account
    assert not summary.failure_modes, summary.failure_modes
    # The adder on its own: the server's sum is a fact of its rollout.
    assert (adder_code, adder.status) == (0, "succeeded"), adder.error
    assert [f.claim for f in adder.summaries[0].facts] == ["The sum of 1 and 1 is 2."] * 2


# -- the daemon: REST, the OpenAI endpoint, /mcp ------------------------------------------------


@asynccontextmanager
async def mcp_daemon(toml: Path, backend: GatedBackend) -> AsyncIterator[tuple[str, RunManager]]:
    """The daemon (its run manager and HTTP server) from ``toml``; yields
    its URL and the manager."""
    async with serving_manager(load_config(toml), [backend]) as served:
        yield served.url, served.manager


DAEMON = "[server]\nport = 0\nshutdown_grace_s = 0.5\n\n[store]\npath = 'runs.db'\n"


async def stored_trajectories(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """Every stored trajectory of a run (the lead's and the adder's), by rollout id."""
    detail = (await http.get(f"/v1/runs/{run_id}")).json()
    found: dict[str, Any] = {}
    for rollout in detail["rollouts"]:
        path = f"/v1/runs/{run_id}/rollouts/{rollout['rollout_id']}"
        found[rollout["rollout_id"]] = (await http.get(path)).json()
    return found


def lead_and_adder(run_id: str, trajectories: dict[str, Any]) -> tuple[Any, Any]:
    """The lead's trajectory (rollout ``<run>-r0``) and its one sub-rollout's."""
    others = dict(trajectories)
    lead = others.pop(f"{run_id}-r0")
    [(adder_id, adder)] = others.items()
    assert adder_id.startswith(f"{run_id}-r0.adder-"), adder_id
    return lead, adder


async def rest_detail(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """A run through ``POST /v1/runs``; its stored detail once it succeeded."""
    created = await http.post("/v1/runs", json={"task": task_for(name), "agent": "lead"})
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    while True:
        detail: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()
        if detail["run"]["status"] in ("succeeded", "failed", "cancelled"):
            break
        await anyio.sleep(0.05)
    assert detail["run"]["status"] == "succeeded", detail["run"]
    # The lead's and the adder's stored trajectories hold the tool results.
    lead, adder = lead_and_adder(run_id, await stored_trajectories(http, run_id))
    a, b = FILES[name]
    assert lead["steps"][0]["tool_results"][0]["content"] == f"{a} {b}\n"
    assert adder["steps"][0]["tool_results"][0]["content"] == f"The sum of {a} and {b} is {a + b}."
    return detail


async def rest_run(http: httpx.AsyncClient, name: str) -> str:
    """A run through ``POST /v1/runs``; its answer."""
    answer: str = (await rest_detail(http, name))["result"]["answer"]
    return answer


async def openai_run(url: str, name: str) -> str:
    """A run through the OpenAI endpoint, with the official client."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model="agentrt/lead", messages=[{"role": "user", "content": task_for(name)}]
        )
    return reply.choices[0].message.content or ""


async def mcp_run(url: str, name: str) -> str:
    """A run through ``run_agent`` at ``/mcp``, with the official MCP client."""
    async with Client(f"{url}/mcp", mode="legacy") as client:
        result = await client.call_tool("run_agent", {"task": task_for(name), "agent": "lead"})
    assert result.is_error is False, result.content
    assert result.structured_content is not None
    assert result.structured_content["status"] == "succeeded"
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    answer: str = result.structured_content["answer"]
    assert block.text.startswith(f"{answer}\n\n")
    return answer


@pytest.mark.anyio
async def test_daemon_rest_runs_share_one_process_per_server(
    config_file: Callable[[str], Path],
) -> None:
    backend = GatedBackend()
    async with (
        mcp_daemon(config_file(DAEMON), backend) as (url, _manager),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        await assert_runs_share_one_process_per_server(backend, lambda name: rest_run(http, name))
    assert_tool_results_reached_the_model(backend.requests, list(FILES))


@pytest.mark.anyio
async def test_daemon_openai_and_mcp_runs_share_one_process_per_server(
    config_file: Callable[[str], Path],
) -> None:
    backend = GatedBackend()
    async with mcp_daemon(config_file(DAEMON), backend) as (url, _manager):
        started = one_process_each()
        by_openai, during_openai = await two_runs_at_once(
            backend, lambda name: openai_run(url, name)
        )
        openai_requests = list(backend.requests)
        backend.requests.clear()
        by_mcp, during_mcp = await two_runs_at_once(backend, lambda name: mcp_run(url, name))
    assert by_openai == by_mcp == ANSWERS
    assert during_openai == during_mcp == {server: [pid] for server, pid in started.items()}
    assert_tool_results_reached_the_model(openai_requests, list(FILES))
    assert_tool_results_reached_the_model(backend.requests, list(FILES))


@pytest.mark.anyio
async def test_daemon_restarts_a_killed_server_through_its_actor(
    config_file: Callable[[str], Path],
) -> None:
    backend = GatedBackend()
    async with (
        mcp_daemon(config_file(DAEMON), backend) as (url, manager),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        first = await rest_run(http, "a.txt")
        before = one_process_each()
        status = await kill_everything_and_wait_for_its_restart(manager.runtime)
        after = one_process_each()
        backend.requests.clear()
        # After the restart, every entry point's runs call the new process.
        with anyio.fail_after(60):
            again = [
                await rest_run(http, "b.txt"),
                await openai_run(url, "b.txt"),
                await mcp_run(url, "b.txt"),
            ]
        assert one_process_each() == after
        metrics = (await http.get("/metrics")).text
    assert first == ANSWERS["a.txt"]
    assert again == [ANSWERS["b.txt"]] * 3
    # Operators see it too: both servers ready, one restart of server-everything.
    assert 'agentrt_mcp_server_ready{server="everything",state="ready"} 1.0' in metrics
    assert 'agentrt_mcp_server_ready{server="files",state="ready"} 1.0' in metrics
    assert 'agentrt_mcp_server_restarts_total{server="everything"} 1.0' in metrics
    assert (status.restarts, status.actor_restarts) == (1, 0)
    assert after["everything"] != before["everything"]
    assert after["files"] == before["files"]
    assert_tool_results_reached_the_model(backend.requests, ["b.txt"])


@pytest.mark.anyio
async def test_daemon_stores_the_adders_trajectory_as_the_adders(
    config_file: Callable[[str], Path],
) -> None:
    async with (
        mcp_daemon(config_file(DAEMON), GatedBackend()) as (url, _manager),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        run_id = (await rest_detail(http, "a.txt"))["run"]["run_id"]
        lead, adder = lead_and_adder(run_id, await stored_trajectories(http, run_id))
    assert (lead["agent"], lead["parent_rollout_id"]) == ("lead", None)
    assert adder["agent"] == "adder"
    assert adder["task"] == "Add 17 and 25."
    assert adder["parent_rollout_id"] == f"{run_id}-r0"
