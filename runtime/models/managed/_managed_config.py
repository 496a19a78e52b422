"""Configuration, states and errors of managed model servers.

Plain data for :mod:`agentrt.runtime.models.managed._managed_server`: the pydantic
:class:`ManagedServerConfig` a user writes, the :class:`ServerState` a server
reports, and :class:`ManagedServerError`, which quotes the server's last
output lines.  Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrt.runtime.kernel._backoff import Backoff
from agentrt.runtime.kernel._errors import BackendUnavailable

__all__ = ["ManagedServerConfig", "ManagedServerError", "ServerState"]

#: Recent output lines quoted in an error message.
ERROR_TAIL: Final = 25


class ManagedServerConfig(BaseModel):
    """How to run one model server and decide that it is up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """Name of the server in logs and errors (e.g. ``vllm-smol``)."""
    kind: Literal["vllm", "sglang", "command"]
    """``vllm``: ``vllm serve MODEL``; ``sglang``: ``python -m
    sglang.launch_server --model-path MODEL``; ``command``: ``command`` as given."""
    model: str | None = None
    """Model path or name to serve (required for ``vllm`` and ``sglang``)."""
    served_model_name: str | None = None
    """Name the server answers to in requests (``--served-model-name``)."""
    host: str = "127.0.0.1"
    """Address the server binds to and that clients use."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port to serve on; ``None`` picks a free port once, kept across restarts."""
    command: tuple[str, ...] = ()
    """Full argv for ``kind="command"``.  ``{host}``, ``{port}``, ``{model}`` and
    ``{served_model_name}`` inside an argument are replaced by their values."""
    extra_args: tuple[str, ...] = ()
    """Arguments appended to the command line (e.g. ``--max-model-len 2048``)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set on top of this process's environment."""
    executable: str | None = None
    """``vllm``: the ``vllm`` program; ``sglang``: the Python interpreter.
    Default: from ``venv`` when given, else ``vllm`` on PATH / this interpreter."""
    venv: Path | None = None
    """A virtualenv holding the server (its ``bin/vllm`` or ``bin/python``)."""
    cwd: Path | None = None
    """Working directory of the server process."""
    health_path: str = "/health"
    """Path polled on the base URL until it answers 2xx."""
    health_url: str | None = None
    """Full health URL, overriding ``health_path`` (e.g. on another port)."""
    startup_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds from spawning to a healthy answer before the start fails."""
    health_interval_s: float = Field(default=0.5, gt=0)
    """Seconds between health polls while starting."""
    health_request_timeout_s: float = Field(default=5.0, gt=0)
    """Deadline of one health request."""
    liveness_interval_s: float = Field(default=10.0, ge=0)
    """Seconds between health probes once up; 0 watches the process only."""
    liveness_failures: int = Field(default=3, ge=1)
    """Failed probes in a row that count as a crash (the server is restarted)."""
    restart: bool = True
    """Restart the server after it crashes (once it has been healthy)."""
    max_restarts: int = Field(default=5, ge=0)
    """Crashes in a row (without ``backoff_reset_s`` of health between them)
    after which ``run`` gives up and raises."""
    backoff_initial_s: float = Field(default=1.0, ge=0)
    """Delay before the first restart after a crash."""
    backoff_multiplier: float = Field(default=2.0, ge=1)
    """Factor applied to the delay per further crash in a row."""
    backoff_max_s: float = Field(default=60.0, ge=0)
    """Cap on the restart delay."""
    backoff_reset_s: float = Field(default=60.0, ge=0)
    """Healthy seconds after which the crash count (and the delay) resets."""
    stop_grace_s: float = Field(default=10.0, ge=0)
    """Seconds between SIGTERM and SIGKILL of the process group when stopping."""
    log_lines: int = Field(default=200, ge=1)
    """Recent output lines kept for status and error messages."""
    log_output: Literal["debug", "info", "off"] = "info"
    """Level at which the server's output lines go to structlog."""

    def base_url(self, port: int | None = None) -> str:
        """``http://host:port`` without a trailing slash, for ``port``
        (default: the configured one; ``ValueError`` when there is none)."""
        port = port if port is not None else self.port
        if port is None:
            raise ValueError(f"managed server {self.name!r} has no port yet")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    def backoff(self) -> Backoff:
        """The restart policy these fields describe (no restarts when
        ``restart`` is off)."""
        return Backoff(
            initial_s=self.backoff_initial_s,
            max_s=self.backoff_max_s,
            multiplier=self.backoff_multiplier,
            reset_after_s=self.backoff_reset_s,
            max_restarts=self.max_restarts if self.restart else 0,
        )

    @model_validator(mode="after")
    def _check_kind(self) -> Self:
        if self.kind in ("vllm", "sglang") and not self.model:
            raise ValueError(f"managed server {self.name!r}: kind={self.kind!r} needs `model`")
        if self.kind == "command" and not self.command:
            raise ValueError(f"managed server {self.name!r}: kind='command' needs `command`")
        if not self.health_path.startswith("/"):
            raise ValueError(f"managed server {self.name!r}: health_path must start with '/'")
        return self


class ServerState(enum.Enum):
    """Where a managed server is in its life."""

    IDLE = "idle"
    STARTING = "starting"
    HEALTHY = "healthy"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class ManagedServerError(BackendUnavailable):
    """A managed server could not be started or kept running.

    ``recent_output`` holds the last lines it printed (also quoted in the
    message); ``exit_code`` is its exit status when it exited."""

    def __init__(
        self,
        message: str,
        *,
        server: str,
        endpoint: str,
        exit_code: int | None = None,
        recent_output: tuple[str, ...] = (),
    ) -> None:
        self.exit_code = exit_code
        self.recent_output = recent_output
        tail = recent_output[-ERROR_TAIL:]
        if tail:
            message += "\n  last output:\n" + "\n".join("    " + line for line in tail)
        else:
            message += " (it printed nothing)"
        super().__init__(message, backend=f"managed:{server}", endpoint=endpoint)
