"""Driving the daemon's web page from a test: the ``web_*.mjs`` scripts
beside this file, run by Node with playwright-core and the OS's Chromium
(.ci/browser-setup.sh installs both)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from tests._support.needs import require

HERE = Path(__file__).parent
CHROMIUM = Path(os.environ.get("AGENTRT_CHROMIUM", "/usr/bin/chromium"))
TERMINAL = {"succeeded", "failed", "cancelled"}


def _playwright_dirs() -> list[Path]:
    cache = Path(os.environ.get("AGENTRT_CACHE", Path.home() / ".cache" / "agentrt"))
    dirs = [Path(p) for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]
    return [*dirs, cache / "node-browser" / "node_modules"]


@dataclass(frozen=True)
class PageDriver:
    """Node and playwright-core, ready to run a ``web_*.mjs`` script."""

    node: str
    node_path: str

    async def drive(self, script: str, plan: dict[str, Any], *, within_s: float) -> dict[str, Any]:
        """The report of ``script`` (a file beside this one) run on ``plan``
        (``chromium`` added); fails the test with the script's reason when
        it could not drive the page."""
        plan = {**plan, "chromium": str(CHROMIUM)}
        with anyio.fail_after(within_s):
            done = await anyio.run_process(
                [self.node, str(HERE / script), json.dumps(plan)],
                env={**os.environ, "NODE_PATH": self.node_path},
                check=False,
            )
        err = done.stderr.decode(errors="replace")
        # The reason first, then the end of the report (what the page showed).
        assert done.returncode == 0, err if len(err) < 7500 else err[:1500] + " ... " + err[-6000:]
        report: dict[str, Any] = json.loads(done.stdout)
        return report


def page_driver() -> PageDriver:
    """What drives Chromium; skips (or fails when
    ``AGENTRT_REQUIRE_BROWSER=1``) when something is missing."""
    node = shutil.which("node")
    modules = next(
        (d for d in _playwright_dirs() if (d / "playwright-core" / "package.json").is_file()), None
    )
    missing = [
        what
        for what, ok in (
            ("node on PATH", node is not None),
            (f"Chromium at {CHROMIUM}", CHROMIUM.is_file()),
            ("playwright-core (NODE_PATH or ~/.cache/agentrt/node-browser)", modules is not None),
        )
        if not ok
    ]
    if missing:
        reason = "the browser test needs " + ", ".join(missing) + " (.ci/browser-setup.sh)"
        require(False, "AGENTRT_REQUIRE_BROWSER", reason)
    assert node is not None
    assert modules is not None
    return PageDriver(node, str(modules))


async def wait_terminal(
    client: httpx.AsyncClient, run_id: str, *, within_s: float = 20
) -> dict[str, Any]:
    """The run's detail once it has ended."""
    with anyio.fail_after(within_s):
        while True:
            detail: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if detail["run"]["status"] in TERMINAL:
                return detail
            await anyio.sleep(0.05)
