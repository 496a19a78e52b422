"""Time to first token through each surface: how long after the model
backend produced a run's first piece of text does a client see it?

The sim-server (in this process, a per-token latency of ``--token-ms``)
serves an OpenAI-compatible backend wrapped to note when each call's first
text left it.  ``--runs`` runs per surface, ``--concurrent`` at a time:

- ``Runtime.stream``: the first ``TokenDelta`` with text;
- ``daemon SSE``: ``POST /v1/runs`` then ``GET /v1/runs/{id}/events``, the
  first ``token`` event with text (a daemon in this process, its HTTP server
  on its own thread);
- ``OpenAI stream``: ``POST /v1/chat/completions`` with ``stream: true``,
  the first chunk with ``content``.

Reported per surface: the lag (client receipt minus backend production)
p50, p95 and max, against the target of 100 ms (issue 15).  Exits 0 on a
MISS, like the other benches.

    python bench/streaming.py                    # 20 runs per surface, 4 at a time
    python bench/streaming.py --runs 50 --concurrent 25
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
import httpx

from agentrt.protocols import ModelReply, ModelRequest, RunStarted, TokenDelta
from agentrt.runtime.engine import Runtime
from agentrt.runtime.engine.configfile import config_from_mapping
from agentrt.runtime.models.base import StreamDelta
from agentrt.runtime.models.openai import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.serve.daemon import DaemonEndpoint, run_daemon
from agentrt.testing import SimServer, SimServerConfig

TARGET_MS: Final = 100.0
Via = Callable[["httpx.AsyncClient", "FirstText"], Awaitable[float]]
TASK: Final = "Say something long."


class FirstText:
    """A backend noting when each call's first text left it, by request id."""

    def __init__(self, inner: OpenAIBackend) -> None:
        self.inner = inner
        self.first: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def models(self) -> list[str]:
        return self.inner.models

    async def complete(self, request: ModelRequest) -> ModelReply:
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        key = request.request_id or ""
        async with aclosing(self.inner.stream(request)) as deltas:
            async for delta in deltas:
                if delta.content and key not in self.first:
                    self.first[key] = time.monotonic()
                yield delta

    def lag(self, run_id: str, seen: float) -> float:
        """Seconds from the run's first step's first text to ``seen``."""
        return seen - self.first[f"{run_id}-r0-0"]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


async def via_runtime(rt: Runtime, backend: FirstText) -> float:
    run_id = ""
    async with rt.stream(TASK) as events:
        async for event in events:
            if isinstance(event, RunStarted):
                run_id = event.run_id
            elif isinstance(event, TokenDelta) and event.text:
                seen = time.monotonic()
                async for _ in events:  # the rest of the run
                    pass
                return backend.lag(run_id, seen)
    raise RuntimeError("no token came")


async def via_sse(client: httpx.AsyncClient, backend: FirstText) -> float:
    posted = await client.post("/v1/runs", json={"task": TASK, "agent": "talker"})
    run_id = posted.json()["run_id"]
    seen: float | None = None
    event = ""
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif (
                line.startswith("data: ")
                and event == "token"
                and seen is None
                and json.loads(line[6:])["text"]
            ):
                seen = time.monotonic()
    if seen is None:
        raise RuntimeError("no token event came")
    return backend.lag(run_id, seen)


async def via_openai(client: httpx.AsyncClient, backend: FirstText) -> float:
    body = {
        "model": "agentrt/talker",
        "stream": True,
        "messages": [{"role": "user", "content": TASK}],
    }
    seen: float | None = None
    run_id = ""
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk: dict[str, Any] = json.loads(line[6:])
            run_id = chunk["id"].removeprefix("chatcmpl-")
            delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
            if delta.get("content") and seen is None:
                seen = time.monotonic()
    if seen is None:
        raise RuntimeError("no content chunk came")
    return backend.lag(run_id, seen)


async def measure(runs: int, concurrent: int, one: Callable[[], Awaitable[float]]) -> list[float]:
    lags: list[float] = []
    limit = anyio.Semaphore(concurrent)

    async def run() -> None:
        async with limit:
            lags.append(await one())

    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(run)
    return lags


def row(surface: str, lags: list[float]) -> str:
    ms = sorted(x * 1000 for x in lags)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    verdict = "PASS" if p95 <= TARGET_MS else "MISS"
    return (
        f"{surface:>16} {len(ms):>5} {statistics.median(ms):>8.1f} {p95:>8.1f} "
        f"{ms[-1]:>8.1f} {TARGET_MS:>8.0f} {verdict:>6}"
    )


async def main(args: argparse.Namespace) -> None:
    sim = SimServerConfig(
        ttft_ms=args.ttft_ms,
        token_ms=args.token_ms,
        reply_tokens=args.reply_tokens,
        tool_rounds=0,
        stream_tick_ms=5,
    )
    rows: list[str] = []
    async with SimServer(sim) as server:
        config = OpenAIBackendConfig(name="sim", base_url=server.url + "/v1", models=["sim"])
        async with OpenAIBackend(config) as inner:
            backend = FirstText(inner)
            async with Runtime(backends=[backend]) as rt:
                lags = await measure(args.runs, args.concurrent, lambda: via_runtime(rt, backend))
                rows.append(row("Runtime.stream", lags))
            with tempfile.TemporaryDirectory() as tmp:
                daemon = config_from_mapping(
                    {
                        "server": {"port": 0, "shutdown_grace_s": 0.5},
                        "store": {"path": str(Path(tmp) / "runs.db")},
                        "agents": {"talker": {"instructions": "Talk."}},
                        "warm_prefix": False,
                    },
                    source="bench/streaming.py",
                )
                async with anyio.create_task_group() as tg:
                    endpoint: DaemonEndpoint = await tg.start(
                        lambda task_status: run_daemon(
                            daemon, backends=[backend], task_status=task_status
                        )
                    )
                    async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
                        surfaces: list[tuple[str, Via]] = [
                            ("daemon SSE", via_sse),
                            ("OpenAI stream", via_openai),
                        ]
                        for surface, via in surfaces:
                            lags = await measure(
                                args.runs, args.concurrent, partial(via, client, backend)
                            )
                            rows.append(row(surface, lags))
                    tg.cancel_scope.cancel()
    print(
        f"time to first token: sim-server {args.ttft_ms:g} ms to the first token, "
        f"{args.token_ms:g} ms per token, {args.reply_tokens} tokens; "
        f"{args.runs} runs per surface, {args.concurrent} at a time"
    )
    head = ("surface", "runs", "p50 ms", "p95 ms", "max ms", "target")
    print(f"{head[0]:>16} {head[1]:>5} " + " ".join(f"{h:>8}" for h in head[2:]) + " result")
    for line in rows:
        print(line)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per surface")
    parser.add_argument("--concurrent", type=int, default=4, help="runs at a time")
    parser.add_argument("--ttft-ms", type=float, default=40.0)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--reply-tokens", type=int, default=30)
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, parse(), backend="asyncio")
