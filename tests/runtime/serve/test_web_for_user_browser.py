"""The web page shows what a run's tools meant for the person, not the
model (issue 30: MCP content whose ``audience`` is ``["user"]``, a tool
result's ``for_user``), in headless Chromium.

A daemon runs in-process with ``server-everything`` over stdio; a scripted
model calls its ``get-annotated-message`` (``success``: one block, for the
user only), then answers.  ``web_for_user.mjs`` opens the run's view and
reads its "For you" panel and the rollout's tool result (what the model got
and, apart, what was for the person); a run whose tools returned nothing of
the kind shows no such panel.

Skipped without Chromium, playwright-core or npx; fails instead when
``AGENTRT_REQUIRE_BROWSER=1`` or ``AGENTRT_REQUIRE_NPX=1`` (CI).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ToolMessage, UserMessage
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from tests.tools.mcp.conftest import EVERYTHING

from ._web_page import page_driver
from .conftest import daemon_config
from .test_web_mcp_browser import _npx

pytestmark = [pytest.mark.process, pytest.mark.slow]

TOOL = "everything__get-annotated-message"
FOR_USER = "Operation completed successfully"
SHOWN_TO_MODEL = "[the tool's result is meant for the user and was shown to them]"


def _script(request: ModelRequest) -> ReplySpec:
    """Task "annotated": the annotated message once, then "done"; any
    other task: a plain answer with no tool call."""
    task = next(m.content for m in request.messages if isinstance(m, UserMessage))
    if task != "annotated":
        return "plain answer"
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return ScriptedToolCall(TOOL, {"messageType": "success"})
    return "done"


async def _run(client: httpx.AsyncClient, task: str) -> str:
    posted = await client.post("/v1/runs", json={"task": task, "agent": "teller"})
    assert posted.status_code == 201, posted.text
    run_id: str = posted.json()["run_id"]
    with anyio.fail_after(60):
        while True:
            detail = (await client.get(f"/v1/runs/{run_id}")).json()
            if detail["run"]["status"] in {"succeeded", "failed", "cancelled"}:
                assert detail["run"]["status"] == "succeeded", detail
                return run_id
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_page_shows_what_tools_meant_for_the_person(tmp_path: Path) -> None:
    browser = page_driver()
    npx = _npx()
    config = daemon_config(
        tmp_path,
        mcp={"everything": {"command": npx, "args": ["-y", EVERYTHING]}},
        agents={"teller": {"tools": [TOOL], "stop_on": []}},
    )
    backend = ScriptedBackend(_script)
    async with anyio.create_task_group() as tg:
        endpoint: DaemonEndpoint = await tg.start(
            lambda task_status: run_daemon(config, backends=[backend], task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=endpoint.url, timeout=10) as client:
            run_id = await _run(client, "annotated")
            plain_id = await _run(client, "plain")
            plan = {
                "url": endpoint.url,
                "runId": run_id,
                "plainRunId": plain_id,
                "timeoutMs": 20000,
            }
            report = await browser.drive("web_for_user.mjs", plan, within_s=90)
        tg.cancel_scope.cancel()
    assert report["pageErrors"] == []
    assert report["consoleErrors"] == []
    # The model never got the block (its request has the placeholder) ...
    assert FOR_USER not in str(backend.requests[1])
    # ... the page shows it to the person: in the run's view, once, naming
    # the rollout's step and tool ...
    assert report["panelHidden"] is False
    [note] = report["notes"]
    assert note["text"] == FOR_USER
    assert note["head"] == f"r0 · step 0 · {TOOL}"
    # ... and in the rollout's steps, apart from what the model got.
    assert report["results"] == [{"model": SHOWN_TO_MODEL, "forUser": FOR_USER}]
    # A run whose tools meant nothing for the person has no such panel.
    assert report["plainPanelHidden"] is True
    assert report["plainNotes"] == 0
