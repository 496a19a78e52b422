"""The cost-success frontier: scoring, Pareto marks, the simulation, the CLI entry."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agentrt.protocols import Cost, Usage
from agentrt.runtime.evaluation._frontier import (
    PolicyScore,
    default_policies,
    evaluate_frontier,
    frontier_main,
    mark_pareto,
    render_table,
    wilson_interval,
)
from agentrt.runtime.routing._policies import RoutingPolicy
from agentrt.runtime.routing._simulation import SimTask, SimulatedTaskRunner, simulated_tasks


def test_wilson_interval_matches_known_values() -> None:
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert round(high, 4) == 0.2775
    assert wilson_interval(0, 0) == (0.0, 1.0)


def ps(name: str, success: float, usd: float) -> PolicyScore:
    return PolicyScore(
        policy=name,
        tasks=10,
        successes=round(success * 10),
        success_rate=success,
        ci_low=0.0,
        ci_high=1.0,
        mean_usd=usd,
        mean_tokens=0.0,
        mean_calls=0.0,
    )


def test_pareto_marks_only_undominated_policies() -> None:
    marked = mark_pareto(
        [
            ps("large", 0.9, 1.0),
            ps("small", 0.4, 0.1),
            ps("wasteful", 0.5, 0.8),  # dominated by "mid"
            ps("mid", 0.7, 0.5),
            ps("tie", 0.7, 0.5),  # equal to "mid": neither dominates
        ]
    )
    assert [s.policy for s in marked] == ["small", "mid", "tie", "wasteful", "large"]
    assert {s.policy for s in marked if s.pareto} == {"small", "mid", "tie", "large"}


@pytest.mark.anyio
async def test_evaluate_frontier_scores_what_the_runner_reports() -> None:
    tasks = list(range(20))

    async def runner(task: int, policy: RoutingPolicy) -> tuple[bool, Cost]:
        big = policy.name == "always-large"
        ok = task < (18 if big else 8)
        cost = Cost(usd=0.01 if big else 0.001, usage=Usage(prompt_tokens=task), model_calls=2)
        return ok, cost

    policies = default_policies()
    scores = await evaluate_frontier(
        tasks,
        {"always-small": policies["always-small"], "always-large": policies["always-large"]},
        runner,
        concurrency=3,
    )
    by_name = {s.policy: s for s in scores}
    assert by_name["always-large"].success_rate == pytest.approx(0.9)
    assert by_name["always-small"].successes == 8
    assert by_name["always-small"].mean_usd == pytest.approx(0.001)
    assert by_name["always-large"].mean_tokens == pytest.approx(sum(tasks) / 20)
    assert by_name["always-large"].mean_calls == 2
    assert all(s.pareto for s in scores)
    low, high = wilson_interval(18, 20)
    assert (by_name["always-large"].ci_low, by_name["always-large"].ci_high) == (low, high)


@pytest.mark.anyio
async def test_boundary_policies_bound_the_frontier_in_the_simulation() -> None:
    tasks = simulated_tasks(200, seed=7)
    runner = SimulatedTaskRunner(seed=7)
    scores = {s.policy: s for s in await evaluate_frontier(tasks, default_policies(), runner)}
    small, large, cascade = scores["always-small"], scores["always-large"], scores["cascade"]
    assert min(scores.values(), key=lambda s: s.mean_usd) is small
    assert max(scores.values(), key=lambda s: s.success_rate) is large
    assert small.mean_usd < cascade.mean_usd < large.mean_usd
    assert small.success_rate < cascade.success_rate <= large.success_rate
    # The boundaries differ by more than noise.
    assert large.ci_low > small.ci_high
    assert small.pareto
    assert large.pareto


@pytest.mark.anyio
async def test_simulation_is_reproducible_and_charges_real_usage() -> None:
    task = SimTask(id="t", difficulty=0.5)
    policy = default_policies()["cascade"]
    first = await SimulatedTaskRunner(seed=3)(task, policy)
    again = await SimulatedTaskRunner(seed=3)(task, policy)
    assert first == again
    _, cost = first
    assert cost.model_calls >= 1
    assert cost.usage.prompt_tokens >= 1200
    assert cost.usd > 0


@pytest.mark.anyio
async def test_reference_results_decide_success() -> None:
    policies = default_policies()
    solved_by_large = SimTask(id="r", difficulty=0.1, reference={"small": False, "large": True})
    runner = SimulatedTaskRunner()
    ok_small, _ = await runner(solved_by_large, policies["always-small"])
    ok_large, _ = await runner(solved_by_large, policies["always-large"])
    assert (ok_small, ok_large) == (False, True)


def test_frontier_main_simulated_prints_a_table() -> None:
    out = io.StringIO()
    code = frontier_main(["--simulate", "--n-tasks", "60", "--seed", "1"], out=out)
    text = out.getvalue()
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("cost-success frontier: 60 simulated tasks (seed 1)")
    assert lines[1].split() == [
        "policy",
        "success",
        "95%",
        "CI",
        "mean",
        "$",
        "tokens",
        "calls",
        "pareto",
    ]
    names = [line.split()[0] for line in lines[3:]]
    assert sorted(names) == ["always-large", "always-small", "cascade", "threshold"]
    assert names[0] == "always-small"  # cheapest first
    assert lines[3].endswith("*")


def test_frontier_main_reads_a_jsonl_task_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"id": f"t{i}", "difficulty": 0.9, "reference": {"small": False, "large": True}}
        for i in range(10)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = io.StringIO()
    assert frontier_main(["--tasks", str(path)], out=out) == 0
    table = {line.split()[0]: line.split() for line in out.getvalue().splitlines()[3:]}
    assert table["always-large"][1] == "100.0%"
    assert table["always-small"][1] == "0.0%"


def test_frontier_main_reports_bad_input_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "difficulty": 0.2}\n{"id": "b"}\n', encoding="utf-8")
    assert frontier_main(["--tasks", str(path)], out=io.StringIO()) == 2
    assert f"{path}:2:" in capsys.readouterr().err
    path.write_text('{"id": "a", "difficulty": 1.5}\n', encoding="utf-8")
    assert frontier_main(["--tasks", str(path)], out=io.StringIO()) == 2
    assert "difficulty must be in [0, 1]" in capsys.readouterr().err
    assert frontier_main(["--tasks", str(tmp_path / "missing.jsonl")], out=io.StringIO()) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_render_table_aligns_columns() -> None:
    text = render_table(mark_pareto([ps("a", 0.5, 0.1), ps("bb", 0.25, 0.2)]), title="t")
    lines = text.splitlines()
    assert lines[0] == "t"
    assert len({len(line) for line in lines[1:3]}) == 1
    assert lines[3].split()[0] == "a"
    assert lines[3].endswith("*")
    assert not lines[4].endswith("*")
