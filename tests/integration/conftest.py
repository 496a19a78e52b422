"""Fixtures for integration tests against a real vLLM server (CPU build).

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
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

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


def _unavailable(reason: str) -> None:
    hint = "install it with `.ci/vllm-setup.sh` or point AGENTRT_VLLM_URL at a running server"
    message = f"vLLM CPU server unavailable: {reason}; {hint}"
    if os.environ.get("AGENTRT_REQUIRE_VLLM") == "1":
        pytest.fail(message + " (AGENTRT_REQUIRE_VLLM=1, so this is a failure)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VllmServer]:
    url = os.environ.get("AGENTRT_VLLM_URL", "").strip().rstrip("/")
    if url:
        yield VllmServer(
            base_url=url.removesuffix("/v1"),
            model=os.environ.get("AGENTRT_VLLM_MODEL", SERVED_NAME),
        )
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
        env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        startup_timeout_s=float(os.environ.get("AGENTRT_VLLM_STARTUP_TIMEOUT", "900")),
        health_interval_s=1.0,
        liveness_interval_s=0.0,
        restart=False,
        stop_grace_s=20.0,
        log_lines=400,
        log_output="off",
    )
    server = ManagedServer(config)
    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"use_uvloop": True}
    ) as portal:
        began = time.monotonic()
        with portal.wrap_async_context_manager(server):
            info = VllmServer(
                base_url=server.base_url,
                model=SERVED_NAME,
                startup_s=time.monotonic() - began,
                pid=server.pid,
                command=tuple(server.command_line()),
            )
            _started.append(info)
            yield info


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """One event loop flavour here: every test costs real inference time."""
    return ("asyncio", {"use_uvloop": True})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for info in _started:
        terminalreporter.write_line(
            f"vLLM server (pid {info.pid}) became healthy in {info.startup_s:.1f} s: "
            + " ".join(info.command)
        )
