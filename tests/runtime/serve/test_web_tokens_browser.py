"""The web page shows a run's text as it is generated, and why a run
failed (issue 15, items 2 and 6), in headless Chromium.

A daemon runs in-process on a scripted model that makes two tool calls,
then streams its answer a word at a time (30 ms a piece);
``web_tokens.mjs`` posts the run from the page, opens its view and records
each state of its "Generating" panel and its header; this test asserts the
text grew in several steps while the run was running, each a prefix of the
answer, before the answer appeared, and that the header's cost counted the
steps so far meanwhile (not "0 tok").  A second run, on a model server that
cannot be reached, shows why it failed in the run's view (the rollout's
error and the run's) and in the runs list.  A tournament's matches that no
verdict decided say so.

Skipped without Chromium or playwright-core (``.ci/browser-setup.sh``);
fails instead when ``AGENTRT_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ToolMessage, UserMessage
from agentrt.runtime.kernel._errors import BackendUnavailable
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedToolCall

from ._web_page import page_driver, wait_terminal
from .conftest import daemon_config

ANSWER = " ".join(f"word{i}" for i in range(40))
DEAD = "cannot connect to 127.0.0.1:9"


def _script(request: ModelRequest) -> ReplySpec:
    """Two calculator steps, then the answer; a task saying "fail" fails."""
    task = next(m.content for m in request.messages if isinstance(m, UserMessage))
    if isinstance(task, str) and "fail" in task:
        return BackendUnavailable(DEAD, backend="scripted")
    done = sum(isinstance(m, ToolMessage) for m in request.messages)
    if done < 2:
        return ScriptedToolCall("calculator", {"expression": f"{done}+1"})
    return ANSWER


@pytest.mark.anyio
async def test_page_shows_text_as_it_is_generated_and_why_a_run_failed(tmp_path: Path) -> None:
    browser = page_driver()
    config = daemon_config(tmp_path)
    backend = ScriptedBackend(_script, token_delay_s=0.03)
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(config, backends=[backend], task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=10) as client:
            failed = await client.post("/v1/runs", json={"task": "fail", "agent": "solver"})
            assert failed.status_code == 201, failed.text
            failed_id = failed.json()["run_id"]
            assert (await wait_terminal(client, failed_id))["run"]["status"] == "failed"
            rtv = await client.post(
                "/v1/runs",
                json={
                    "task": "t",
                    "agent": "solver",
                    "scaling": {"rollouts": 3, "aggregate": "rtv"},
                },
            )
            assert rtv.status_code == 201, rtv.text
            rtv_id = rtv.json()["run_id"]
            assert (await wait_terminal(client, rtv_id))["run"]["status"] == "succeeded"
            plan = {
                "url": endpoint.url,
                "rtvRunId": rtv_id,
                # As the page's form posts it: streamed from its first call.
                "run": {"task": "talk", "agent": "solver", "stream_tokens": True},
                "failedRunId": failed_id,
                "timeoutMs": 20000,
            }
            report = await browser.drive("web_tokens.mjs", plan, within_s=60)
            detail = await wait_terminal(client, report["runId"])
        tg.cancel_scope.cancel()
    assert report["pageErrors"] == []
    assert report["consoleErrors"] == []

    # The text grew while the run ran: several states, each a prefix of the answer.
    growing = [t["live"] for t in report["texts"] if t["live"] and t["status"] == "running"]
    assert len(growing) >= 3, report["texts"]
    assert all(ANSWER.startswith(text) for text in growing), growing
    assert [len(t) for t in growing] == sorted(len(t) for t in growing)
    assert len(growing[0]) < len(ANSWER) / 2  # seen early, not only at the end
    assert report["final"]["answer"] == ANSWER == detail["run"]["answer"]
    # The header's cost is live: the two tool steps' tokens while the answer
    # is generated (the ledger reports only when the rollout ends).
    live_costs = {t["cost"] for t in report["texts"] if t["live"] and t["status"] == "running"}
    assert all("so far" in cost and "2 calls" in cost for cost in live_costs), live_costs

    # A failed run says why, in its view and in the list.
    why = report["failed"]
    assert any(DEAD in text for text in why["rolloutErrors"]), why
    assert DEAD in why["runError"]
    assert DEAD in why["listError"]

    # RTV over three agreeing rollouts: a bye, and matches no judge was
    # needed for, each saying so (not a bare "0 - 0").
    assert "bye" in report["voteNotes"]
    assert "same answer: not judged" in report["voteNotes"]
