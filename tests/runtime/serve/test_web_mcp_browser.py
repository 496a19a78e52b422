"""The web page answers MCP servers' questions and links the OAuth approvals
they wait for (issue 16, items 1 and 2), in headless Chromium.

A daemon (with a bearer token) runs in-process with two MCP servers:
``server-everything`` over stdio (``elicitation.mode`` and ``url`` are
``ask``, so its questions become the run's ``elicitation`` events) and an
OAuth-protected server (optional, left waiting for a person's approval).
The scripted model calls everything's elicitation tools, then answers with
the tool's result, which quotes the answer the server received.
``web_mcp.mjs`` drives the page like a person: types the token, follows the
authorization link (the server connects and the panel empties), answers a
form question (after Accept with a required field empty sent nothing),
declines one, completes a URL question, meets a URL that is no web link,
and sees a question answered by another client stop waiting.

Skipped without Chromium, playwright-core or npx; fails instead when
``AGENTRT_REQUIRE_BROWSER=1`` or ``AGENTRT_REQUIRE_NPX=1`` (CI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest

from agentrt.protocols import ModelRequest, ToolMessage, UserMessage
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.testing._scripted import ReplySpec
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools.mcp._mcp_config import StdioServerConfig
from tests._support.daemon import serving_manager
from tests._support.needs import program
from tests.tools.mcp.conftest import EVERYTHING, _fixture_server
from tests.tools.mcp.oauth_server import oauth_servers

from ._web_page import page_driver

pytestmark = pytest.mark.process

TOKEN = "web-mcp-token-0123456789"
FORM_TOOL = "everything__trigger-elicitation-request"
URL_TOOL = "everything__trigger-url-elicitation"
# No annotations: destructive by the spec's reading, so approved per call.
GUARDED_TOOL = "fx__lookup"
KEY = "<script>alert(1)</script>"
# Server text with markup in it: the page must show it as text.
URL_MESSAGE = 'Verify your account <img src=x onerror="document.title=1"> <b>now</b>'
LINK = "http://127.0.0.1:9/verify?step=1&who=ada"
NOT_A_LINK = "javascript:alert(document.domain)"
NAME = "Ada <b>Lovelace</b> & co"


def _npx() -> str:
    return program("npx", "AGENTRT_REQUIRE_NPX", "needs npx on PATH to start server-everything")


def _script(request: ModelRequest) -> ReplySpec:
    """Call the task's elicitation tool once, then answer with its result."""
    results = [m.content for m in request.messages if isinstance(m, ToolMessage)]
    if results:
        return results[0]
    task = next(m.content for m in request.messages if isinstance(m, UserMessage))
    assert isinstance(task, str)
    if task == "guarded":
        return ScriptedToolCall(GUARDED_TOOL, {"key": KEY})
    if task == "gated":
        return ScriptedToolCall("calculator", {"expression": "6*7"})
    if task.startswith("url "):
        return ScriptedToolCall(URL_TOOL, {"url": task[4:], "message": URL_MESSAGE})
    return ScriptedToolCall(FORM_TOOL, {})


def _received(answer: str) -> dict[str, Any]:
    """The elicitation result server-everything says it received."""
    assert "Raw result:" in answer, answer
    raw: dict[str, Any] = json.loads(answer.split("Raw result:", 1)[1])
    return raw


async def _pending(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await http.get("/v1/mcp/authorizations")
    assert response.status_code == 200, response.text
    pending: list[dict[str, Any]] = response.json()["pending"]
    return pending


async def _detail(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    detail: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()
    return detail


@pytest.mark.slow
@pytest.mark.anyio
async def test_page_answers_mcp_questions_and_links_authorizations(tmp_path: Path) -> None:
    browser = page_driver()
    npx = _npx()
    everything = StdioServerConfig(name="everything", command=npx, args=["-y", EVERYTHING])
    async with oauth_servers() as servers:
        config = config_from_mapping(
            {
                "server": {"port": 0, "shutdown_grace_s": 0.5, "token": TOKEN},
                "store": {"path": str(tmp_path / "runs.db")},
                "mcp": {
                    "everything": {
                        **everything.model_dump(mode="json"),
                        "elicitation": {"mode": "ask", "url": "ask"},
                    },
                    "fx": {
                        **_fixture_server("fx").model_dump(mode="json"),
                        "destructive": "approve",
                    },
                    "secure": servers.daemon_server(tmp_path / "tokens"),
                },
                "agents": {
                    "asker": {"tools": [FORM_TOOL]},
                    "urler": {"tools": [URL_TOOL]},
                    "guarded": {"tools": [GUARDED_TOOL]},
                    "gated": {"tools": ["calculator"]},
                },
                "approvals": {"calculator": {"message": "May I compute?"}},
                "default_agent": "asker",
                "warm_prefix": False,
            },
            source="test_web_mcp_browser",
        )
        backend = ScriptedBackend(_script)
        async with serving_manager(config, [backend]) as daemon:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=daemon.url, headers=headers, timeout=10) as http:
                with anyio.fail_after(30):
                    while not (pending := await _pending(http)):  # noqa: ASYNC110 - polled like the page
                        await anyio.sleep(0.05)
                (prompt,) = pending
                plan = {
                    "url": daemon.url,
                    "token": TOKEN,
                    "timeoutMs": 20000,
                    "asker": {"agent": "asker", "task": "ask me"},
                    "urler": {
                        "agent": "urler",
                        "link": f"url {LINK}",
                        "refused": f"url {NOT_A_LINK}",
                    },
                    "answer": {
                        "name": NAME,
                        "integer": 7,
                        "enum": "Joey",
                        # One more instrument; the only fish unticked.
                        "toggle": [
                            ["untitledMultipleSelectEnum", "Piano"],
                            ["titledMultipleSelectEnum", "fish-1"],
                        ],
                    },
                    "guarded": {"agent": "guarded", "task": "guarded"},
                    "gated": {"agent": "gated", "task": "gated"},
                    "screenshot": os.environ.get("AGENTRT_WEB_MCP_SCREENSHOT"),
                }
                report = await browser.drive("web_mcp.mjs", plan, within_s=90)
                left = await _pending(http)
                runs = {
                    phase: await _detail(http, report[phase]["runId"])
                    for phase in (
                        "form",
                        "decline",
                        "url",
                        "refused",
                        "elsewhere",
                        "approval",
                        "gated",
                    )
                }
        grants = [g.grant_type for g in servers.state.grants]

    # The page itself: no script errors, no failed calls once it had the token.
    assert report["pageErrors"] == []
    assert report["consoleErrors"] == []
    assert report["failedRequests"] == []
    # The only refusal: the first answer to a question already answered
    # elsewhere would be a 404; none happened here.
    assert report["badResponses"] == []

    # The authorizations panel linked the URL the daemon lists, opened it in
    # a tab with no hold on the page; the approval went through and the
    # entry went away by itself (polled).
    auth = report["authorization"]
    assert auth["server"] == prompt["server"] == "secure"
    assert auth["href"] == prompt["authorization_url"]
    assert parse_qs(urlsplit(auth["href"]).query)["code_challenge_method"] == ["S256"]
    assert auth["target"] == "_blank"
    assert "noopener" in auth["rel"].split()
    assert auth["tabHasOpener"] is False
    assert auth["tabUrl"].startswith(prompt["redirect_uri"])
    assert servers.mcp_url in auth["text"]
    assert auth["goneAfterMs"] < 10000
    assert left == []
    assert grants == ["authorization_code"]

    # A form question: server, message, one field per schema property with
    # the right control and the schema's defaults filled in.
    shown = report["form"]["shown"]
    assert (shown["server"], shown["mode"], shown["state"]) == ("everything", "form", "waiting")
    assert shown["message"] == "Please provide inputs for the following fields:"
    assert shown["buttons"] == ["Accept", "Decline", "Cancel"]
    fields = {f["name"]: f for f in shown["fields"]}
    assert list(fields) == [
        "name",
        "check",
        "firstLine",
        "email",
        "homepage",
        "birthdate",
        "integer",
        "number",
        "untitledSingleSelectEnum",
        "untitledMultipleSelectEnum",
        "titledSingleSelectEnum",
        "titledMultipleSelectEnum",
        "legacyTitledEnum",
    ]
    assert (fields["name"]["type"], fields["name"]["required"], fields["name"]["value"]) == (
        "text",
        True,
        "",
    )
    assert fields["check"]["type"] == "checkbox"
    assert fields["firstLine"]["value"] == "It was a dark and stormy night."
    assert [fields[n]["type"] for n in ("email", "homepage", "birthdate")] == [
        "email",
        "url",
        "date",
    ]
    integer, number = fields["integer"], fields["number"]
    assert (integer["type"], integer["min"], integer["max"], integer["step"], integer["value"]) == (
        "number",
        "1",
        "100",
        "1",
        "42",
    )
    assert (number["min"], number["max"], number["step"], number["value"]) == (
        "0",
        "1000",
        "any",
        "3.14",
    )
    single = fields["untitledSingleSelectEnum"]
    assert (single["tag"], single["value"]) == ("select", "Monica")
    assert [v for v, _ in single["options"] if v] == [
        "Monica",
        "Rachel",
        "Joey",
        "Chandler",
        "Ross",
        "Phoebe",
    ]
    assert ["hero-1", "Superman"] in fields["titledSingleSelectEnum"]["options"]
    assert ["pet-2", "Dogs"] in fields["legacyTitledEnum"]["options"]
    assert fields["untitledMultipleSelectEnum"]["checked"] == ["Guitar"]
    assert fields["titledMultipleSelectEnum"]["checked"] == ["fish-1"]

    # Accept with the required name empty: the browser refused, nothing sent.
    empty = report["form"]["afterEmptyAccept"]
    assert empty == {"state": "waiting", "answersSent": 0, "nameInvalid": True}

    # What the page sent (with the token) is what the server received.
    sent = report["answers"]
    assert all(a["auth"] == f"Bearer {TOKEN}" for a in sent)
    expected = {
        "name": NAME,
        "check": True,
        "firstLine": "It was a dark and stormy night.",
        "integer": 7,
        "number": 3.14,
        "untitledSingleSelectEnum": "Joey",
        "untitledMultipleSelectEnum": ["Guitar", "Piano"],
        "titledSingleSelectEnum": "hero-1",
        # Optional and left empty: not sent.
        "legacyTitledEnum": "pet-1",
    }
    assert sent[0]["body"] == {"action": "accept", "content": expected}
    form_run = runs["form"]["run"]
    assert form_run["status"] == "succeeded"
    assert _received(form_run["answer"]) == {"action": "accept", "content": expected}
    assert report["form"]["end"]["status"] == "succeeded"
    assert report["form"]["end"]["answer"] == form_run["answer"]
    assert report["form"]["end"]["waiting"] == "0"
    assert report["form"]["settled"]["outcome"] == "Accepted"
    assert report["form"]["settled"]["buttons"] == []
    assert report["form"]["settled"]["formShown"] is False

    # Declined: the server heard a decline and the run went on.
    assert sent[1]["body"] == {"action": "decline"}
    assert _received(runs["decline"]["run"]["answer"]) == {"action": "decline"}
    assert runs["decline"]["run"]["status"] == "succeeded"
    assert report["decline"]["settled"]["outcome"] == "Declined"

    # URL mode: the link (new tab, no opener) and the server's message as
    # text (its markup not parsed); "I've done it" accepts.
    url_q = report["url"]["shown"]
    assert url_q["mode"] == "url"
    assert url_q["message"] == URL_MESSAGE
    assert url_q["markup"] == 0
    assert url_q["link"] == {
        "href": LINK,
        "rel": "noopener noreferrer",
        "target": "_blank",
        "text": LINK,
    }
    assert url_q["buttons"] == ["I've done it", "Decline"]
    assert sent[2]["body"] == {"action": "accept"}
    assert _received(runs["url"]["run"]["answer"]) == {"action": "accept"}
    assert "completed the URL elicitation" in runs["url"]["run"]["answer"]

    # A URL that is not a web address: no link, no accept; declined.
    refused = report["refused"]["shown"]
    assert refused["link"] is None
    assert NOT_A_LINK in refused["refused"]
    assert refused["buttons"] == ["Decline"]
    assert sent[3]["body"] == {"action": "decline"}
    assert _received(runs["refused"]["run"]["answer"]) == {"action": "decline"}

    # Answered by another client (the fifth POST, not the page's): the page
    # stopped offering it once its tool call ended.
    assert report["elsewhere"]["post"] == 200
    assert sent[4]["body"] == {"action": "cancel"}
    assert _received(runs["elsewhere"]["run"]["answer"]) == {"action": "cancel"}
    assert report["elsewhere"]["settled"]["state"] == "gone"
    assert report["elsewhere"]["settled"]["buttons"] == []
    assert report["elsewhere"]["settled"]["formShown"] is False

    # A destructive tool's call (``destructive = "approve"``): the page asks
    # whether it may run, with its arguments as text; allowed, it ran.
    approval = report["approval"]["shown"]
    assert (approval["mode"], approval["server"]) == ("approval", "fx")
    assert f"'{GUARDED_TOOL}'" in approval["message"]
    assert approval["buttons"] == ["Allow", "Deny"]
    assert json.loads(approval["arguments"]) == {"key": KEY}
    assert approval["markup"] == 0
    assert sent[5]["body"] == {"action": "accept"}
    assert runs["approval"]["run"]["status"] == "succeeded"
    assert runs["approval"]["run"]["answer"] == f"value-of-{KEY}"
    assert report["approval"]["settled"]["outcome"] == "Allowed"

    # A tool under ``[approvals.calculator]`` (agentrt's own approval, no
    # server): the run showed waiting; denied, the calculator did not run and
    # the model read why.
    gated = report["gated"]["shown"]
    assert (gated["mode"], gated["server"]) == ("approval", None)
    assert gated["message"] == "May I compute?"
    assert gated["buttons"] == ["Allow", "Deny"]
    assert json.loads(gated["arguments"]) == {"expression": "6*7"}
    assert (len(sent), sent[6]["body"]) == (7, {"action": "decline"})
    assert report["gated"]["end"]["status"] == "succeeded"
    assert "the person denied it" in runs["gated"]["run"]["answer"]
    assert "42" not in runs["gated"]["run"]["answer"]
