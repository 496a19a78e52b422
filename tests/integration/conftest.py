"""Fixtures for integration tests against a real vLLM server (CPU build)
and a real SGLang server (its CPU engine).

``vllm_server`` (session scope) is the server the tests talk to:

- ``AGENTRT_VLLM_URL`` set (``http://host:port``, with or without ``/v1``):
  that server is used as is (``AGENTRT_VLLM_MODEL`` names its model, default
  ``smol``).
- Otherwise the vLLM venv and the converted SmolLM2 folder made by
  ``.ci/vllm-setup.sh`` are started through ``ManagedServer`` (the same code
  agentrt uses for managed model servers), in an event loop of its own on a
  portal thread so it keeps draining the server's output while tests run,
  and stopped at the end of the session.
- Neither available: the tests skip, saying how to install it, unless
  ``AGENTRT_REQUIRE_VLLM=1`` (CI sets it): then they fail.

Locations follow the setup script: ``AGENTRT_VLLM_VENV`` (default
``~/.cache/agentrt/vllm-venv``) and ``AGENTRT_VLLM_MODEL_DIR`` (default
``~/.cache/agentrt/smol-hf``).  ``AGENTRT_VLLM_EXTRA_ARGS`` adds arguments to
``vllm serve``.

``sglang_server`` (session scope) is the same for SGLang: ``AGENTRT_SGLANG_URL``
names a running server (``AGENTRT_SGLANG_MODEL`` its served name, default
``smol``); else the venv and the libcuda stub ``.ci/sglang-setup.sh`` makes
(``AGENTRT_SGLANG_VENV``, ``AGENTRT_SGLANG_STUB_DIR``; the model folder is the
vLLM one) are started once per session through ``ManagedServer``; else the
tests skip, unless ``AGENTRT_REQUIRE_SGLANG=1``.  ``sglang_managed`` gives
the same launch as a ``managed = {...}`` table, for tests in which agentrt
starts an SGLang server itself (test_sglang_fleet.py).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx
import pytest

from agentrt.runtime.models._prompt_estimate import CALIBRATION_MARGIN, CALIBRATION_TEXT
from agentrt.runtime.models.managed._managed_server import ManagedServer, ManagedServerConfig

SERVED_NAME = "smol"

#: ``--enforce-eager``: vLLM's torch.compile warm-up takes 160-290 s on two
#: cores and its AOT cache fails to reload here ("'function' object has no
#: attribute 'finalize_loading'"), so every start would pay it again; eager
#: mode starts in about 3 s of engine init and decodes this 135M model about
#: as fast.  ``--enable-prompt-tokens-details`` makes usage report cached
#: prompt tokens.
VLLM_ARGS: tuple[str, ...] = (
    "--max-model-len",
    "2048",
    "--dtype",
    "bfloat16",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--enforce-eager",
    "--uvicorn-log-level",
    "warning",
)


@dataclass(frozen=True)
class VllmServer:
    """Where the vLLM server is and what it serves."""

    base_url: str
    """``http://host:port`` (no ``/v1``)."""
    model: str
    """The served model name."""
    startup_s: float | None = None
    """Seconds from spawn to healthy, when this session started it."""
    pid: int | None = None
    """Pid of the server process, when this session started it."""
    command: tuple[str, ...] = field(default_factory=tuple)
    """The ``vllm serve`` command line, when this session started it."""


_started: list[VllmServer] = []


def _home_cache(name: str) -> Path:
    return Path.home() / ".cache" / "agentrt" / name


def _unavailable(reason: str, server: str = "vLLM", name: str = "VLLM") -> None:
    script = f".ci/{name.lower()}-setup.sh"
    hint = f"install it with `{script}` or point AGENTRT_{name}_URL at a running server"
    message = f"{server} CPU server unavailable: {reason}; {hint}"
    if os.environ.get(f"AGENTRT_REQUIRE_{name}") == "1":
        pytest.fail(message + f" (AGENTRT_REQUIRE_{name}=1, so this is a failure)", pytrace=False)
    pytest.skip(message)


def _given(name: str) -> tuple[str, str] | None:
    """``(base_url, model)`` of the running server ``AGENTRT_{name}_URL``
    names (served model: ``AGENTRT_{name}_MODEL``), if it names one."""
    url = os.environ.get(f"AGENTRT_{name}_URL", "").strip().rstrip("/")
    if not url:
        return None
    return url.removesuffix("/v1"), os.environ.get(f"AGENTRT_{name}_MODEL", SERVED_NAME)


@contextmanager
def _started_server(config: ManagedServerConfig) -> Iterator[tuple[ManagedServer, float]]:
    """The managed server of ``config``, running (on uvloop, in a thread of
    its own) for the session, and the seconds it took to become healthy."""
    server = ManagedServer(config)
    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"use_uvloop": True}
    ) as portal:
        began = time.monotonic()
        with portal.wrap_async_context_manager(server):
            yield server, time.monotonic() - began


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VllmServer]:
    given = _given("VLLM")
    if given is not None:
        yield VllmServer(*given)
        return
    venv = Path(os.environ.get("AGENTRT_VLLM_VENV") or _home_cache("vllm-venv"))
    model_dir = Path(os.environ.get("AGENTRT_VLLM_MODEL_DIR") or _home_cache("smol-hf"))
    if not (venv / "bin" / "vllm").is_file():
        _unavailable(f"no vLLM venv at {venv} (no bin/vllm)")
    if not (model_dir / "config.json").is_file():
        _unavailable(f"no converted SmolLM2 model at {model_dir} (no config.json)")
    extra = tuple(shlex.split(os.environ.get("AGENTRT_VLLM_EXTRA_ARGS", "")))
    config = ManagedServerConfig(
        name="vllm-smol",
        kind="vllm",
        venv=venv,
        model=str(model_dir),
        served_model_name=SERVED_NAME,
        extra_args=VLLM_ARGS + extra,
        # One OpenMP thread (vLLM leaves torch's one per core on the CPU): see
        # sglang_managed below; here test_run_e2e's vLLM run took 185 s with
        # two and 56 s with one.
        env={"VLLM_CPU_KVCACHE_SPACE": "2", "OMP_NUM_THREADS": "1"},
        startup_timeout_s=float(os.environ.get("AGENTRT_VLLM_STARTUP_TIMEOUT", "900")),
        health_interval_s=1.0,
        liveness_interval_s=0.0,
        restart=False,
        stop_grace_s=20.0,
        log_lines=400,
        log_output="off",
    )
    with _started_server(config) as (server, startup_s):
        info = VllmServer(
            base_url=server.base_url,
            model=SERVED_NAME,
            startup_s=startup_s,
            pid=server.pid,
            command=tuple(server.command_line()),
        )
        _started.append(info)
        yield info


#: SGLang on this CPU (RECIPES.md, docs/sglang.md): ``--device cpu`` with
#: torch-native attention (its own CPU kernels need AVX-512/AMX), no
#: overlap scheduler, a small KV pool (4 GB RSS in all), and Prometheus
#: metrics (aborted requests, cached tokens) whose gauges are updated at
#: every decode step (by default every 40th: seconds on this CPU).  Its
#: scheduler polls in a busy loop while idle (half a core here, for as long
#: as the session's server lives): ``--sleep-on-idle`` makes it wait on its
#: sockets instead.
SGLANG_ARGS: tuple[str, ...] = (
    "--sleep-on-idle",
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--disable-overlap-schedule",
    "--max-total-tokens",
    "8192",
    "--enable-metrics",
    "--decode-log-interval",
    "1",
)


@dataclass(frozen=True)
class SGLangServer:
    """Where the SGLang server is, what it serves, and its recent output."""

    base_url: str
    """``http://host:port``."""
    model: str
    """The served model name."""
    model_path: str = ""
    """What ``--model-path`` was, when this session started it."""
    startup_s: float | None = None
    """Seconds from spawn to healthy, when this session started it."""
    pid: int | None = None
    """Pid of the server process, when this session started it."""
    command: tuple[str, ...] = field(default_factory=tuple)
    """The launch command line, when this session started it."""
    output: Callable[[], tuple[str, ...]] = tuple
    """The server's most recent output lines (empty for a server given by URL)."""


_started_sglang: list[SGLangServer] = []


async def calibrated_chars_per_token(base_url: str, model: str) -> float:
    """What the context budget must estimate for ``model``: the server's own
    ``POST /tokenize`` count of the calibration text, with the margin."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        reply = await client.post("/tokenize", json={"model": model, "prompt": CALIBRATION_TEXT})
    assert reply.status_code == 200, reply.text
    counted: int = reply.json()["count"]
    return len(CALIBRATION_TEXT) / counted * CALIBRATION_MARGIN


def sglang_managed(name: str, **fields: Any) -> dict[str, Any]:
    """The ``ManagedServerConfig`` fields that run SGLang on this CPU (the
    venv, stub and model folder ``.ci/sglang-setup.sh`` makes, the
    arguments above) as plain data, like a ``managed = {...}`` table of
    ``agentrt.toml``; ``fields`` override them.  Skips (or fails, with
    ``AGENTRT_REQUIRE_SGLANG=1``) when the install is missing."""
    venv = Path(os.environ.get("AGENTRT_SGLANG_VENV") or _home_cache("sglang-venv"))
    stub = Path(os.environ.get("AGENTRT_SGLANG_STUB_DIR") or _home_cache("sglang-cuda-stub"))
    model_dir = Path(
        os.environ.get("AGENTRT_SGLANG_MODEL_DIR")
        or os.environ.get("AGENTRT_VLLM_MODEL_DIR")
        or _home_cache("smol-hf")
    )
    missing = [
        f"no {what} at {path}"
        for what, path in (
            ("SGLang venv", venv / ".agentrt-sglang-setup"),
            ("libcuda stub", stub / "libcuda.so.1"),
            ("converted SmolLM2 model", model_dir / "config.json"),
        )
        if not path.is_file()
    ]
    if missing:
        _unavailable("; ".join(missing), "SGLang", "SGLANG")
    return {
        "name": name,
        "kind": "sglang",
        "venv": str(venv),
        "model": str(model_dir),
        "served_model_name": SERVED_NAME,
        "extra_args": list(SGLANG_ARGS),
        # The CPU engine (else the scheduler imports vLLM's CUDA ops), the
        # stub libcuda.so.1 (sgl_kernel links it; it answers "no device"),
        # and one OpenMP thread: torch's default of one per core decodes 4
        # tokens in 7-12 s while the other cores' work preempts one of its
        # threads at every step (the suite runs two workers on two cores),
        # and in 0.4-1.5 s with one thread (three calls each, load 8-10; SGLang's
        # own thread binding, SGLANG_CPU_OMP_THREADS_BIND, needs AMX).
        "env": {
            "SGLANG_USE_CPU_ENGINE": "1",
            "LD_LIBRARY_PATH": str(stub),
            "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
        },
        "startup_timeout_s": float(os.environ.get("AGENTRT_SGLANG_STARTUP_TIMEOUT", "600")),
        "health_interval_s": 1.0,
        "stop_grace_s": 20.0,
        "log_lines": 2000,
        "log_output": "off",
        **fields,
    }


@pytest.fixture(scope="session")
def sglang_server() -> Iterator[SGLangServer]:
    given = _given("SGLANG")
    if given is not None:
        yield SGLangServer(*given)
        return
    config = ManagedServerConfig.model_validate(
        sglang_managed("sglang-smol", liveness_interval_s=0.0, restart=False)
    )
    with _started_server(config) as (server, startup_s):
        info = SGLangServer(
            base_url=server.base_url,
            model=SERVED_NAME,
            model_path=str(config.model),
            startup_s=startup_s,
            pid=server.pid,
            command=tuple(server.command_line()),
            output=lambda: server.recent_output,
        )
        _started_sglang.append(info)
        yield info


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """One event loop flavour here: every test costs real inference time."""
    return ("asyncio", {"use_uvloop": True})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for name, started in (("vLLM", _started), ("SGLang", _started_sglang)):
        for info in started:
            terminalreporter.write_line(
                f"{name} server (pid {info.pid}) became healthy in {info.startup_s:.1f} s: "
                + " ".join(info.command)
            )
