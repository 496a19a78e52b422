"""The sandboxed tools' options where users set them: a spec's ``shell``
takes extra read-only paths and the agent's ``tool_timeout_s``; agents
defined inline in ``agentrt.toml`` get ``shell``, ``editor`` and ``python``
by naming them; a task's environment reaches its commands."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import Field

from agentrt import Runtime
from agentrt.agents import _bindings
from agentrt.agents._spec_loader import load_spec
from agentrt.protocols import ModelRequest, RunResult, ScalingSpec, ToolMessage
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import configure_logging, reset_logging
from agentrt.runtime.testing._scripted import ScriptedBackend, ScriptedToolCall
from agentrt.tools.sandbox._bwrap import Sandbox, SandboxConfig, SandboxEnvironment
from agentrt.tools.sandbox._workspaces import default_workspace_root

pytestmark = [pytest.mark.anyio, pytest.mark.process, pytest.mark.usefixtures("bwrap")]


def _results(request: ModelRequest) -> list[str]:
    return [str(m.content) for m in request.messages if isinstance(m, ToolMessage)]


def _spec(path: Path, tools: str, tool_timeout_s: float) -> Path:
    path.write_text(
        "entry: coder\n"
        "agents:\n"
        "  coder:\n"
        "    instructions: Code.\n"
        f"    tools:\n{tools}"
        "    limits:\n"
        "      max_steps: 4\n"
        f"      tool_timeout_s: {tool_timeout_s}\n"
    )
    return path


async def _each_calls_once(
    spec: Path, tool: str, arguments: dict[str, Any], rollouts: int = 1
) -> tuple[RunResult, list[str]]:
    """A run of ``rollouts`` rollouts of the spec's agent, each of which
    calls ``tool`` once; the run's result and what the tool returned to
    the model, call by call."""
    seen: list[str] = []

    def script(request: ModelRequest) -> Any:
        results = _results(request)
        if results:
            seen.extend(results)
            return "done"
        return ScriptedToolCall(tool, arguments)

    async with Runtime(
        {"early_stop": False, "default_agent": "coder"},
        backends=[ScriptedBackend(script)],
        agents={"coder": load_spec(spec)},
    ) as rt:
        result = await rt.run("go", scaling=ScalingSpec(rollouts=rollouts))
    return result, seen


async def _one_call(spec: Path, tool: str, arguments: dict[str, Any]) -> str:
    """What the tool returned to the model for one call."""
    _, (text,) = await _each_calls_once(spec, tool, arguments)
    return text


async def test_a_spec_shell_sees_its_read_only_paths_and_nothing_more(open_dir: Path) -> None:
    shown = open_dir / "toolchain"
    shown.mkdir()
    (shown / "VERSION").write_text("1.2.3\n")
    spec = _spec(
        open_dir / "spec.yaml",
        f"      - builtin: shell\n        read_only_paths: [{shown}]\n",
        tool_timeout_s=30,
    )
    text = await _one_call(
        spec,
        "shell",
        {"command": f"cat {shown}/VERSION && (touch {shown}/x 2>&1 || echo read-only)"},
    )
    assert "1.2.3" in text
    assert "read-only" in text
    assert not (shown / "x").exists()
    bare = _spec(open_dir / "bare.yaml", "      - shell\n", tool_timeout_s=30)
    assert "No such file" in await _one_call(bare, "shell", {"command": f"cat {shown}/VERSION"})


def test_sandbox_options_are_checked_where_they_are_written(open_dir: Path) -> None:
    for tools, message in (
        ("      - builtin: calculator\n        read_only_paths: [/opt]\n", "python and shell"),
        ("      - builtin: shell\n        read_only_paths: [rel/dir]\n", "absolute"),
        ("      - builtin: editor\n        timeout_s: 5\n", "python and shell"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_spec(_spec(open_dir / "bad.yaml", tools, tool_timeout_s=30))


@pytest.mark.slow
class _TwoSecondDefault(SandboxConfig):
    """The sandbox's config with a default of 2 s per command (30 s in
    ``SandboxConfig``), so a command past the default is seconds long."""

    timeout_s: float = Field(2.0, gt=0, le=3600)


async def test_a_command_past_the_sandbox_default_completes_under_the_agents_timeout(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sleep 3`` outlives the sandbox's own default (here 2 s per
    command), which the agent's ``tool_timeout_s`` replaces."""
    assert SandboxConfig().timeout_s == 30
    monkeypatch.setattr(_bindings, "SandboxConfig", _TwoSecondDefault)
    assert _TwoSecondDefault().timeout_s == 2
    spec = _spec(open_dir / "spec.yaml", "      - shell\n", tool_timeout_s=120)
    text = await _one_call(spec, "shell", {"command": "sleep 3 && echo finished"})
    assert "Exit code 0." in text
    assert "finished" in text


async def test_the_shell_limit_follows_the_agents_tool_timeout(open_dir: Path) -> None:
    """The command's own limit is the agent's ``tool_timeout_s`` (what the
    model is told, and what the sandbox enforces), not the sandbox's
    default 30 s; a binding's ``timeout_s`` overrides it."""
    told: list[str] = []

    def script(request: ModelRequest) -> Any:
        told.extend(t.description for t in request.tools if t.name == "shell")
        return "done" if _results(request) else ScriptedToolCall("shell", {"command": "true"})

    spec = _spec(open_dir / "spec.yaml", "      - shell\n", tool_timeout_s=120)
    own = _spec(
        open_dir / "own.yaml", "      - builtin: shell\n        timeout_s: 1\n", tool_timeout_s=120
    )
    for path in (spec, own):
        async with Runtime(
            {"early_stop": False, "default_agent": "coder"},
            backends=[ScriptedBackend(script)],
            agents={"coder": load_spec(path)},
        ) as rt:
            await rt.run("go")
    assert "120 s per command" in told[0]
    assert "1 s per command" in told[-1]
    text = await _one_call(own, "shell", {"command": "sleep 5"})
    assert "Timed out after 1 s; every process of the command was killed." in text


async def test_inline_agents_of_agentrt_toml_get_shell_editor_and_python() -> None:
    config = config_from_mapping(
        {
            "agents": {
                "coder": {
                    "instructions": "Code.",
                    "tools": ["shell", "editor", "python"],
                    "limits": {"max_steps": 5},
                }
            },
            "default_agent": "coder",
        },
        source="agentrt.toml",
    )
    calls = iter(
        [
            ScriptedToolCall("shell", {"command": "printf 'x = 1\\n' > a.py && cat a.py"}),
            ScriptedToolCall(
                "editor", {"command": "str_replace", "path": "a.py", "old_str": "1", "new_str": "2"}
            ),
            ScriptedToolCall("python", {"code": "print(6 * 7)"}),
        ]
    )
    seen: list[str] = []

    def script(request: ModelRequest) -> Any:
        seen[:] = _results(request)
        return next(calls, "done")

    async with Runtime(
        config.runtime, backends=[ScriptedBackend(script)], tools=config.tools.build()
    ) as rt:
        await rt.run("edit a.py")
    assert len(seen) == 3, seen
    assert "x = 1" in seen[0]
    assert "error" not in seen[1].lower(), seen[1]
    assert "x = 2" in seen[1]
    assert "42" in seen[2]


async def test_a_task_environment_is_added_to_a_command(open_dir: Path) -> None:
    venv = open_dir / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "hello").write_text("#!/bin/sh\necho hello from the venv\n")
    (venv / "bin" / "hello").chmod(0o755)
    environment = SandboxEnvironment(
        read_only_paths=(str(venv),), env={"PATH": f"{venv}/bin:/usr/bin:/bin", "MARK": "m1"}
    )
    sandbox = Sandbox(SandboxConfig(timeout_s=10))
    with anyio.fail_after(30):
        result = await sandbox.run(["bash", "-c", "hello; echo $MARK"], environment=environment)
        bare = await sandbox.run(["bash", "-c", "hello"])
    assert result.stdout == "hello from the venv\nm1\n"
    assert bare.exit_code == 127
    assert (
        SandboxEnvironment(read_only_paths=(str(open_dir / "none"),))
        .problem()
        .endswith("does not exist")
    )


async def test_a_runs_workspaces_are_deleted_when_it_ends(open_dir: Path) -> None:
    """The ``shell`` and ``editor`` of a spec leave nothing behind once the
    run is over (``agentrt run``, a daemon's runs and its stop go through
    ``Runtime.run``)."""
    spec = _spec(open_dir / "spec.yaml", "      - shell\n      - editor\n", tool_timeout_s=30)
    command = {"command": "pwd && echo kept > f.txt"}
    result, seen = await _each_calls_once(spec, "shell", command, rollouts=2)
    assert len(seen) == 2
    assert all("/workspace" in text for text in seen)
    assert not (default_workspace_root() / result.run_id).exists()


async def test_keep_workspaces_leaves_a_runs_workspaces_and_says_where(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``keep_workspaces = true``: the run's workspaces stay, with what the
    commands wrote, the log names the directory, and no later start sweeps
    them (they have no owner)."""
    spec = _spec(open_dir / "spec.yaml", "      - shell\n", tool_timeout_s=30)

    def script(request: ModelRequest) -> Any:
        if _results(request):
            return "done"
        return ScriptedToolCall("shell", {"command": "echo kept > f.txt"})

    # An earlier test of this worker may have left agentrt's logging
    # configured (then records go to structlog's stream, not to caplog).
    reset_logging()
    caplog.set_level("INFO")
    async with Runtime(
        {"early_stop": False, "default_agent": "coder", "keep_workspaces": True},
        backends=[ScriptedBackend(script)],
        agents={"coder": load_spec(spec)},
    ) as rt:
        result = await rt.run("go", scaling=ScalingSpec(rollouts=2))
    kept = default_workspace_root() / result.run_id
    try:
        files = sorted(p.read_text() for p in kept.glob("*/f.txt"))
        assert files == ["kept\n", "kept\n"]
        assert not (default_workspace_root() / ".owners" / result.run_id).exists()
        assert str(kept) in caplog.text
        assert "workspaces.kept" in caplog.text
    finally:
        shutil.rmtree(kept, ignore_errors=True)


async def test_keep_workspaces_says_where_after_another_test_configured_logging(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The test above after a test that left logging configured (a CLI
    test's ``main()``), as xdist may order them."""
    configure_logging("INFO")
    await test_keep_workspaces_leaves_a_runs_workspaces_and_says_where(open_dir, caplog)
