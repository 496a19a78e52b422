"""One engine, checked on the source: no executor code outside it.

- nothing outside ``runtime/engine/`` names the engine's rollout actor, its
  message or a run's execution (``RolloutActor``, ``RunRollout``,
  ``RunExecution``) or imports the modules that hold them;
- only the actor kernel, the engine, the MCP server actors
  (``tools/mcp``), the managed model servers and the kernel's own example
  and bench spawn actors (``.spawn(``, ``spawn_supervisor(``) or define
  ``Actor`` subclasses;
- the command line and the daemon run tasks only through ``Runtime``: they
  import it, and none of the pieces a run is made of (agents, hierarchies,
  aggregator builders, actor systems).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("protocols", "runtime", "tools", "agents", "aggregators", "bench", "examples")

#: The engine and its placements (where the engine's rollouts run).
ENGINE = ("runtime/engine/", "runtime/placement/")
ENGINE_INTERNALS = frozenset({"RolloutActor", "RunRollout", "RunExecution"})
ENGINE_MODULES = ("agentrt.runtime.engine._rollout_actor", "agentrt.runtime.engine._run_execution")

#: Where actors may be spawned and defined: the kernel, the engine, the
#: long-lived server actors the ``Runtime`` owns, and the kernel's demos.
ACTOR_HOSTS = (
    "runtime/kernel/",
    "runtime/engine/",
    "runtime/placement/",
    "tools/mcp/",
    "runtime/models/managed",
    "examples/actors_counter.py",
    "bench/actors.py",
)
SPAWNS = frozenset({"spawn", "spawn_supervisor"})

ENTRY_POINTS = ("runtime/cli", "runtime/serve")
#: What a run is made of: an entry point that names one runs tasks itself.
RUN_PARTS = frozenset(
    {
        "Agent",
        "Hierarchy",
        "build_hierarchy",
        "AgentNode",
        "PipelineNode",
        "Rollout",
        "build_aggregator",
        "ActorSystem",
        *ENGINE_INTERNALS,
    }
)
RUN_MODULES = (
    "agentrt.agents._agent",
    "agentrt.agents._agent_loop",
    "agentrt.agents._hierarchy",
    "agentrt.agents._delegation",
    "agentrt.agents._pipeline",
    *ENGINE_MODULES,
)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _names(tree: ast.Module) -> list[tuple[int, str]]:
    """Every identifier the module uses: names, attributes, imported names."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.alias):
            found.append((node.lineno, node.asname or node.name.rsplit(".", 1)[-1]))
            found.append((node.lineno, node.name.rsplit(".", 1)[-1]))
    return found


def _imports_within(rel: str, tree: ast.Module, prefixes: tuple[str, ...]) -> list[Finding]:
    """Imports of a module in (or under) ``prefixes``, one finding per import."""

    def within(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in prefixes)

    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from pkg import mod`` imports ``pkg.mod`` when it is a module.
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        hit = next((m for m in modules if within(m)), None)
        if hit is not None:
            found.append(Finding(rel, node.lineno, f"imports {hit}"))
    return found


def engine_internals_used(rel: str, tree: ast.Module) -> list[Finding]:
    """Uses of the engine's rollout actor, its message or a run's execution."""
    found = [
        Finding(rel, line, f"names {name}")
        for line, name in _names(tree)
        if name in ENGINE_INTERNALS
    ]
    found += _imports_within(rel, tree, ENGINE_MODULES)
    return sorted(set(found), key=lambda f: f.line)


def _last_name(node: ast.expr) -> str | None:
    """``c`` of ``a.b.c`` or of ``c``; ``None`` for any other expression."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def actors_hosted(rel: str, tree: ast.Module) -> list[Finding]:
    """Actor spawns (``x.spawn(``, ``spawn_supervisor(``) and ``Actor`` subclasses."""
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = _last_name(func)
            if name in SPAWNS and (isinstance(func, ast.Attribute) or name != "spawn"):
                found.append(Finding(rel, node.lineno, f"calls {name}("))
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                target = base.value if isinstance(base, ast.Subscript) else base
                if _last_name(target) == "Actor":
                    found.append(Finding(rel, node.lineno, f"defines actor {node.name}"))
    return found


def run_parts_used(rel: str, tree: ast.Module) -> list[Finding]:
    """An entry point's uses of what a run is made of (it must ask ``Runtime``)."""
    found = [
        Finding(rel, line, f"names {name}") for line, name in _names(tree) if name in RUN_PARTS
    ]
    found += _imports_within(rel, tree, RUN_MODULES)
    return sorted(set(found), key=lambda f: f.line)


def uses_runtime(tree: ast.Module) -> bool:
    """Whether the module imports ``Runtime`` (from the engine or ``agentrt``)."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module in ("agentrt", "agentrt.runtime.engine", "agentrt.runtime.engine._runtime")
        and any(alias.name == "Runtime" for alias in node.names)
        for node in ast.walk(tree)
    )


def _sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_there_is_something_to_check() -> None:
    sources = [_rel(p) for p in _sources(*SCANNED)]
    assert len(sources) >= 50
    assert "runtime/engine/_rollout_actor.py" in sources
    assert {"runtime/cli/_run_command.py", "runtime/serve/_run_manager.py"} <= set(sources)


def _found_outside(
    allowed: tuple[str, ...], scan: Callable[[str, ast.Module], list[Finding]]
) -> list[str]:
    """What ``scan`` finds in the scanned sources outside the ``allowed`` places."""
    return [
        str(finding)
        for path in _sources(*SCANNED)
        if not _rel(path).startswith(allowed)
        for finding in scan(_rel(path), _tree(path))
    ]


def test_only_the_engine_runs_rollouts_as_actors() -> None:
    bad = _found_outside(ENGINE, engine_internals_used)
    assert not bad, f"rollouts are the engine's to run (use agentrt.Runtime): {bad}"


def test_only_the_kernel_the_engine_and_the_runtimes_servers_host_actors() -> None:
    bad = _found_outside(ACTOR_HOSTS, actors_hosted)
    assert not bad, f"actors outside the kernel, the engine and the Runtime's servers: {bad}"


def test_the_engine_does_host_the_rollouts() -> None:
    """The scans above look for what the engine really does."""
    hosted: set[str] = set()
    internals: list[Finding] = []
    for path in _sources(*ENGINE):
        tree = _tree(path)
        hosted |= {f.what for f in actors_hosted(_rel(path), tree)}
        internals += engine_internals_used(_rel(path), tree)
    assert {"defines actor RolloutActor", "calls spawn(", "calls spawn_supervisor("} <= hosted
    assert {f.what for f in internals} >= {"names RolloutActor", "names RunRollout"}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_points_run_tasks_only_through_the_runtime(entry: str) -> None:
    sources = _sources(entry)
    assert sources
    bad = [str(finding) for path in sources for finding in run_parts_used(_rel(path), _tree(path))]
    assert not bad, f"{entry} must run tasks through agentrt.Runtime, not build them: {bad}"
    assert any(uses_runtime(_tree(path)) for path in sources), f"{entry} never uses Runtime"


def test_the_checks_catch_a_second_executor(tmp_path: Path) -> None:
    bad = tmp_path / "executor.py"
    bad.write_text(
        "from agentrt.actors import Actor, ActorSystem\n"
        "from agentrt.runtime.engine._rollout_actor import RolloutActor\n"
        "import agentrt.runtime.engine._run_execution as run\n"
        "from agentrt.agents._hierarchy import build_hierarchy\n"
        "\n"
        "class AgentActor(Actor[int, int]):\n"
        "    pass\n"
        "\n"
        "async def go(system: ActorSystem, agent) -> None:\n"
        "    ref = await system.spawn(lambda: RolloutActor(agent), name='a')\n"
        "    sup = await system.spawn_supervisor(None)\n"
        "    await run.RunExecution(None).execute()\n"
    )
    tree = _tree(bad)
    internals = {f.what for f in engine_internals_used("executor.py", tree)}
    assert internals == {
        "names RolloutActor",
        "names RunExecution",
        "imports agentrt.runtime.engine._rollout_actor",
        "imports agentrt.runtime.engine._run_execution",
    }
    hosted = [(f.line, f.what) for f in actors_hosted("executor.py", tree)]
    assert hosted == [
        (6, "defines actor AgentActor"),
        (10, "calls spawn("),
        (11, "calls spawn_supervisor("),
    ]
    parts = {f.what for f in run_parts_used("executor.py", tree)}
    assert {"names ActorSystem", "names build_hierarchy", "names RolloutActor"} <= parts
    assert "imports agentrt.agents._hierarchy" in parts
    assert not uses_runtime(tree)

    good = tmp_path / "entry.py"
    good.write_text(
        "import anyio\n"
        "from agentrt import Runtime\n"
        "async def main(task: str) -> None:\n"
        "    async with Runtime() as rt:\n"
        "        await rt.run(task)\n"
        "anyio.run(main, 'q')\n"
    )
    tree = _tree(good)
    assert engine_internals_used("entry.py", tree) == []
    assert actors_hosted("entry.py", tree) == []
    assert run_parts_used("entry.py", tree) == []
    assert uses_runtime(tree)
