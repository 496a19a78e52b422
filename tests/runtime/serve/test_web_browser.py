"""The daemon's web page in headless Chromium (issue 6, item 6).

A daemon runs in-process (``run_daemon``) on a scripted model whose steps
take 0.3 s, so a run visibly progresses.  ``web_check.mjs`` (Node,
playwright-core, the OS's Chromium) drives the page and reports what it
showed; this test asserts on that report and on the API:

- the page loads and lists a run the test started through the API;
- a run started from the page's form opens its view, which updates while
  the run progresses (step counts rise, statuses change, the RTV bracket and
  the budget burn fill in) without a reload, ending in the final answer;
- a rollout's trajectory shows its steps, tool calls and summary;
- the runs list refreshes by itself (a run posted while it is open appears
  and reaches its end).

Skipped without Chromium or playwright-core (``.ci/browser-setup.sh``
installs both), but fails instead when ``AGENTRT_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.aggregators import SimulatedJudge
from agentrt.protocols import ModelRequest, ToolMessage, UserMessage
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.testing import ReplySpec, ScriptedBackend, ScriptedToolCall
from agentrt.tools.builtins._calculator import Calculator

from ._web_page import page_driver, wait_terminal

STEP_LATENCY_S = 0.3
ANSWER = "42"


def _script(request: ModelRequest) -> ReplySpec:
    """Calculator calls until the task's ``steps=N`` is reached, then the answer."""
    steps = 3
    for message in request.messages:
        if isinstance(message, UserMessage) and isinstance(message.content, str):
            found = re.search(r"steps=(\d+)", message.content)
            steps = int(found.group(1)) if found else steps
            break
    done = sum(isinstance(m, ToolMessage) for m in request.messages)
    if request.tools and done < steps - 1:
        return ScriptedToolCall("calculator", {"expression": f"6 * {done + 7}"})
    return ANSWER


def _total_steps(snapshot: dict[str, Any]) -> int:
    return sum(r["steps"] for r in snapshot["rollouts"])


@pytest.mark.anyio
async def test_page_shows_runs_and_updates_live(tmp_path: Path) -> None:
    browser = page_driver()
    config = config_from_mapping(
        {
            "server": {"port": 0},
            "store": {"path": str(tmp_path / "runs.db")},
            "agents": {"calc": {"instructions": "Compute.", "tools": ["calculator"]}},
            "default_agent": "calc",
        },
        source="test_web_browser",
    )
    backend = ScriptedBackend(_script, latency_s=STEP_LATENCY_S)
    judge = SimulatedJudge(ANSWER, 1.0, delay_s=0.05)
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            partial(run_daemon, config, backends=[backend], tools=[Calculator()], judge=judge)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=10) as client:
            page = await client.get("/")
            assert page.status_code == 200, f"the daemon does not serve the page at /: {page.text}"
            assert page.headers["content-type"].startswith("text/html")

            listed = await client.post("/v1/runs", json={"task": "listed run steps=2"})
            assert listed.status_code == 201, listed.text
            listed_id = listed.json()["run_id"]
            assert (await wait_terminal(client, listed_id, within_s=15))["run"][
                "status"
            ] == "succeeded"

            plan = {
                "url": endpoint.url,
                "listedRunId": listed_id,
                "form": {"task": "form run steps=6", "rollouts": 3, "aggregate": "rtv"},
                "pollRun": {"task": "polled run steps=3", "scaling": {"rollouts": 1}},
                "timeoutMs": 20000,
            }
            report = await browser.drive("web_check.mjs", plan, within_s=90)

            form_detail = await wait_terminal(client, report["form"]["runId"], within_s=15)
            polled_detail = await wait_terminal(client, report["polled"]["runId"], within_s=15)
        tg.cancel_scope.cancel()

    # The page itself: no script errors, no failed calls, never reloaded.
    assert report["pageErrors"] == []
    assert report["consoleErrors"] == []
    assert report["badResponses"] == []
    assert report["failedRequests"] == []
    assert report["loads"] == 1

    # The list shows the run the test started through the API.
    assert report["listRow"] == {
        "status": "succeeded",
        "agent": "calc",
        "task": "listed run steps=2",
        "answer": f"→ {ANSWER}",
    }
    assert "calc" in report["agentOptions"]

    # The form posted what was typed.
    form_run = form_detail["run"]
    assert (form_run["task"], form_run["rollouts"], form_run["aggregate"]) == (
        "form run steps=6",
        3,
        "rtv",
    )
    assert report["form"]["task"] == "form run steps=6"
    # The page follows the run it starts at once: it asked to stream from
    # the run's first call.
    assert form_detail["request"]["stream_tokens"] is True
    assert form_run["status"] == "succeeded"
    assert form_run["answer"] == ANSWER

    # Its view updated while it ran: rising step counts, then the end.
    snaps = report["snapshots"]
    totals = [_total_steps(s) for s in snaps]
    assert totals == sorted(totals), f"step counts went backwards: {totals}"
    assert len(set(totals)) >= 4, f"too few distinct states seen: {totals}"
    assert any(s["status"] == "running" and 0 < _total_steps(s) < 18 for s in snaps), totals
    assert any(s["live"] == "live" for s in snaps)
    final = snaps[-1]
    assert final["status"] == "succeeded"
    assert final["live"] == "ended"
    assert final["answer"] == ANSWER
    api_rollouts = {r["rollout_id"]: r for r in form_detail["rollouts"]}
    assert {r["id"]: r["steps"] for r in final["rollouts"]} == {
        rid: r["steps"] for rid, r in api_rollouts.items()
    }
    assert all(r["steps"] == 6 and r["answer"] == ANSWER for r in final["rollouts"])
    # RTV over 3 rollouts: a 2-level bracket (a match and a bye, then a final).
    votes = form_detail["result"]["aggregation_trace"]
    assert final["matches"] == len(votes) >= 2
    assert final["budgetPoints"] >= 2
    assert final["stepPoints"] >= 18
    first = next(s for s in snaps if s["status"])
    assert first["status"] in {"pending", "running"}
    assert first["matches"] == 0

    # A rollout's trajectory: every step, its tool calls, its summary.
    traj = report["trajectory"]
    assert traj["rolloutId"] in api_rollouts
    assert traj["hash"].endswith(f"/rollouts/{traj['rolloutId']}")
    assert (traj["status"], traj["steps"], traj["toolCalls"], traj["toolResults"]) == (
        "finished",
        6,
        5,
        5,
    )
    assert traj["summaryAnswer"] == ANSWER

    # The list refreshed by itself: the run posted while it was open (so
    # not in the list the page loaded) appeared and reached its end, with
    # no reload (``loads == 1`` above).  The list may refresh between the
    # POST and the first look at it, so the first state seen is absent or
    # not yet ended: it was watched changing, not found finished.
    polled = report["polled"]
    assert polled["postStatus"] == 201
    assert polled["statuses"][0] in (None, "pending", "running"), polled["statuses"]
    assert polled["statuses"][-1] == polled_detail["run"]["status"] == "succeeded"
