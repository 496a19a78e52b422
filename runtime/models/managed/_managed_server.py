"""Managed model servers: start ``vllm serve`` / SGLang / any command as one
process (``ManagedServer``), keep it up, stop it cleanly.

Must not import agents, tools or aggregators, nor a specific backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import anyio
import httpx
from anyio.abc import ByteReceiveStream, Process, TaskGroup, TaskStatus

from agentrt.runtime.kernel._backoff import RestartBackoff
from agentrt.runtime.kernel._parent_death import guarded_argv
from agentrt.runtime.models.http._http_client import HttpClientConfig, make_http_client
from agentrt.runtime.models.managed._managed_config import (
    ManagedServerConfig,
    ManagedServerError,
    ServerState,
)
from agentrt.runtime.models.managed._process_group import free_port, port_free, stop_process_group
from agentrt.runtime.observe._log import get_logger

__all__ = ["ManagedServer", "ManagedServerConfig", "ManagedServerError", "ServerState"]

_log = get_logger(__name__)

#: Lines longer than this are cut before logging (a progress bar redrawn
#: without newlines must not grow one log record without bound).
_MAX_LINE: Final = 4000
#: Seconds the output pumps may drain after the process group is gone.
_DRAIN_S: Final = 2.0


def _executable(name: str, path: str | None, cwd: Path | None) -> str | None:
    """Where ``name`` would be executed from (``None``: nowhere), resolved
    as ``execvp`` in ``cwd`` would."""
    if os.sep in name:
        where = Path(cwd or ".", name)
        return str(where) if where.is_file() and os.access(where, os.X_OK) else None
    return shutil.which(name, path=path)


class _Crash(Exception):
    """One server process went away unexpectedly (internal to ``run``)."""

    def __init__(self, reason: str, exit_code: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code


class _Settlement:
    """How one start ended: healthy (``failure`` None) or given up."""

    __slots__ = ("event", "failure")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.failure: ManagedServerError | None = None


class ManagedServer:
    """One supervised model-server process: started in its own process
    group from ``config``, its output logged (tagged with its name) and kept
    in a ring buffer, healthy once its health endpoint answers, restarted
    after a crash with ``RestartBackoff``, stopped with SIGTERM to the group
    and SIGKILL after a grace period; on Linux the group is stopped the
    same way when this process dies, even by SIGKILL (a small launcher
    and watchdog process see to it).  Run it as a service
    (``await tg.start(server.run)`` returns the base URL) or as an async
    context manager.  A failure to start raises ``ManagedServerError``
    naming the server, the health URL and its last output lines."""

    def __init__(
        self, config: ManagedServerConfig, *, http: HttpClientConfig | None = None
    ) -> None:
        self.config = config
        self._port = config.port
        self._http_config = http or HttpClientConfig(
            connect_timeout_s=config.health_request_timeout_s,
            read_timeout_s=config.health_request_timeout_s,
            max_connections=4,
        )
        self._recent: deque[str] = deque(maxlen=config.log_lines)
        self._state = ServerState.IDLE
        self._process: Process | None = None
        self._restarts = 0
        self._last_exit: int | None = None
        # Set when a run became healthy or failed for good; replaced after a crash.
        self._settled = _Settlement()
        self._running = False
        self._run_scope: anyio.CancelScope | None = None
        # Around the current process (or backoff): request_restart cancels it.
        self._process_scope: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._failure: ManagedServerError | None = None
        self._log = _log.bind(server=config.name)

    # -- what callers read ---------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def port(self) -> int:
        """The server's port (chosen on first start when the config has none)."""
        if self._port is None:
            self._port = free_port(self.config.host)
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port`` without a trailing slash (add ``/v1`` for OpenAI)."""
        return self.config.base_url(self.port)

    @property
    def health_url(self) -> str:
        return self.config.health_url or self.base_url + self.config.health_path

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def pid(self) -> int | None:
        """Pid of the running server process (also its process group id)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    @property
    def restarts(self) -> int:
        """How many times the server was restarted after a crash."""
        return self._restarts

    @property
    def last_exit_code(self) -> int | None:
        return self._last_exit

    @property
    def recent_output(self) -> tuple[str, ...]:
        """The last ``log_lines`` lines the server printed, oldest first."""
        return tuple(self._recent)

    def command_line(self) -> list[str]:
        """The argv the server is started with."""
        cfg = self.config
        if cfg.kind == "command":
            values = {
                "{host}": cfg.host,
                "{port}": str(self.port),
                "{model}": cfg.model or "",
                "{served_model_name}": cfg.served_model_name or "",
            }
            argv = []
            for template in cfg.command:
                arg = template
                for key, value in values.items():
                    arg = arg.replace(key, value)
                argv.append(arg)
            return argv + list(cfg.extra_args)
        assert cfg.model is not None  # the validator guarantees it
        if cfg.kind == "vllm":
            exe = cfg.executable or (str(cfg.venv / "bin" / "vllm") if cfg.venv else "vllm")
            argv = [exe, "serve", cfg.model]
        else:
            exe = cfg.executable or (
                str(cfg.venv / "bin" / "python") if cfg.venv else sys.executable
            )
            argv = [exe, "-m", "sglang.launch_server", "--model-path", cfg.model]
        argv += ["--host", cfg.host, "--port", str(self.port)]
        if cfg.served_model_name:
            argv += ["--served-model-name", cfg.served_model_name]
        return argv + list(cfg.extra_args)

    @property
    def failure(self) -> ManagedServerError | None:
        """Why the last run gave up, if it did."""
        return self._failure

    async def wait_healthy(self) -> None:
        """Return once the server is (again) healthy; raise the run's
        :class:`ManagedServerError` if it gives up first.  The caller bounds
        the wait (``anyio.fail_after``)."""
        settled = self._settled  # this run's outcome, whatever runs after it
        await settled.event.wait()
        if settled.failure is not None:
            raise settled.failure

    # -- as an async context manager -------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not ServerState.IDLE or self._tg is not None:
            raise RuntimeError(f"managed server {self.name!r} was already started")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            await tg.start(self._run_in_context)
        except BaseException:
            # Close the group empty-handed so the start error propagates as
            # itself, not inside an ExceptionGroup.
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        self._tg = tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        tg, self._tg = self._tg, None
        if tg is None:
            return False
        tg.cancel_scope.cancel()
        cancelled = exc if isinstance(exc, anyio.get_cancelled_exc_class()) else None
        swallowed = await tg.__aexit__(
            type(cancelled) if cancelled else None,
            cancelled,
            cancelled.__traceback__ if cancelled else None,
        )
        if self._failure is not None:
            raise self._failure
        return bool(swallowed) and cancelled is not None

    async def _run_in_context(self, *, task_status: TaskStatus[str]) -> None:
        # A failure after startup is kept and raised by __aexit__ (the body of
        # the `async with` is cancelled, like a failing task group would do),
        # unwrapped instead of inside an ExceptionGroup.
        try:
            await self.run(task_status=task_status)
        except ManagedServerError:
            if self._tg is None:  # still starting: __aenter__ raises it
                raise
            self._tg.cancel_scope.cancel()  # __aexit__ raises self._failure

    # -- the service ---------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the server until cancelled; report the base URL once healthy.

        The first start must succeed (otherwise :class:`ManagedServerError`);
        later crashes are restarted with backoff up to ``max_restarts`` in a
        row.  On cancellation the process group is stopped before returning.
        One run at a time; a server may be run again after a run ended.
        """
        if self._running:
            raise RuntimeError(f"managed server {self.name!r} is already running")
        self._running = True
        self._failure = None
        if self._settled.event.is_set():
            self._settled = _Settlement()
        reported = False

        def healthy() -> None:
            nonlocal reported
            self._settled.event.set()
            if not reported:
                reported = True
                task_status.started(self.base_url)

        try:
            with anyio.CancelScope() as self._run_scope:
                await self._supervise(healthy)
        except ManagedServerError as exc:
            self._failure = self._settled.failure = exc
            self._settled.event.set()
            raise
        finally:
            self._running = False
            self._run_scope = self._process_scope = None
            if self._state is not ServerState.FAILED:
                self._state = ServerState.STOPPED

    def request_stop(self) -> None:
        """Make the current ``run`` stop the server and return (no error)."""
        if self._run_scope is not None:
            self._run_scope.cancel()

    def request_restart(self) -> bool:
        """Replace the current process (or cut a backoff short) with a fresh
        one now, not counted as a crash; ``wait_healthy`` then waits for the
        fresh one.  ``False`` when no ``run`` is in progress."""
        if not self._running:
            return False
        self._log.info("managed server restart requested")
        if self._settled.event.is_set():
            self._settled = _Settlement()
        if self._process_scope is not None:
            self._process_scope.cancel()
        return True

    async def _supervise(self, on_healthy: Callable[[], None]) -> None:
        """Start, watch, and restart with backoff until cancelled or giving up."""
        backoff = RestartBackoff(self.config.backoff())
        was_healthy = False

        def healthy() -> None:
            nonlocal was_healthy
            was_healthy = True
            on_healthy()

        async with make_http_client(self._http_config) as client:
            while True:
                with anyio.CancelScope() as self._process_scope:
                    crash, healthy_for = await self._run_once(client, healthy)
                if self._process_scope.cancelled_caught:  # request_restart
                    continue
                if not was_healthy:  # the first start must succeed: no retries
                    raise self._error(crash.reason, crash.exit_code)
                if self._settled.event.is_set():  # waiters now wait for the restart
                    self._settled = _Settlement()
                delay = backoff.crashed(healthy_for)
                self._log.warning(
                    "managed server crashed",
                    reason=crash.reason,
                    exit_code=crash.exit_code,
                    crashes_in_a_row=backoff.crashes,
                )
                if delay is None:
                    raise self._error(
                        f"{crash.reason}; giving up ({backoff.limit_reason()})", crash.exit_code
                    )
                self._state = ServerState.BACKOFF
                self._log.info("managed server restarting", delay_s=round(delay, 3))
                with anyio.CancelScope() as self._process_scope:
                    await anyio.sleep(delay)
                self._restarts += 1

    def _error(self, reason: str, exit_code: int | None) -> ManagedServerError:
        """The run's failure, recorded with the ``failed`` state at once
        (``failure`` must not lag behind ``state`` while the run unwinds)."""
        self._state = ServerState.FAILED
        self._failure = ManagedServerError(
            f"managed server {self.name!r} ({' '.join(self.command_line())}): {reason}",
            server=self.name,
            endpoint=self.health_url,
            exit_code=exit_code,
            recent_output=self.recent_output,
        )
        return self._failure

    async def _run_once(
        self, client: httpx.AsyncClient, on_healthy: Callable[[], None]
    ) -> tuple[_Crash, float]:
        """One process from spawn to its end: returns why it ended and how
        long it had been healthy.  Cancellation stops it and propagates."""
        cfg = self.config
        argv = self.command_line()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **cfg.env}
        self._state = ServerState.STARTING
        self._log.info("managed server starting", argv=argv, health=self.health_url)
        began = anyio.current_time()
        if self.config.health_url is None and not port_free(cfg.host, self.port):
            # Another server there would answer our health probe for this one.
            raise self._error(f"port {self.port} on {cfg.host} is already in use", None)
        # The launcher execs the server in a process of its own (so a missing
        # executable would only show as an early exit): look first.
        if _executable(argv[0], env.get("PATH"), cfg.cwd) is None:
            raise self._error(f"cannot start {argv[0]!r}: no such executable", None)
        try:
            # Shielded: a cancellation landing after the spawn but before the
            # return would leak the process and its transport.
            with anyio.CancelScope(shield=True):
                process = await anyio.open_process(
                    # The server's group goes when this process dies, even by SIGKILL.
                    guarded_argv(argv, cfg.stop_grace_s),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=cfg.cwd,
                    start_new_session=True,  # its own process group: stop reaches the children
                )
        except OSError as exc:
            raise self._error(f"cannot start {argv[0]!r}: {exc}", None) from exc
        self._process = process
        healthy_at: float | None = None
        crash: _Crash
        try:
            async with anyio.create_task_group() as pumps:
                assert process.stdout is not None
                assert process.stderr is not None
                pumps.start_soon(self._pump, process.stdout, "stdout")
                pumps.start_soon(self._pump, process.stderr, "stderr")
                try:
                    await self._wait_healthy(client, process)
                    healthy_at = anyio.current_time()
                    self._state = ServerState.HEALTHY
                    self._log.info(
                        "managed server healthy",
                        url=self.base_url,
                        pid=process.pid,
                        startup_s=round(healthy_at - began, 2),
                        restarts=self._restarts,
                    )
                    on_healthy()
                    await self._watch(client, process)
                except _Crash as exc:
                    crash = exc  # returned, not raised: the task group would wrap it
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop_group(process)
                    # The group is gone, so the pipes reach EOF; bound the wait
                    # anyway (a grandchild that left the group may hold them).
                    pumps.cancel_scope.deadline = anyio.current_time() + _DRAIN_S
        finally:
            with anyio.CancelScope(shield=True):
                await process.aclose()
            self._last_exit = process.returncode
            self._process = None
        healthy_for = 0.0 if healthy_at is None else anyio.current_time() - healthy_at
        return crash, healthy_for

    async def _pump(self, stream: ByteReceiveStream, name: str) -> None:
        level = self.config.log_output
        pending = b""
        try:
            async for chunk in stream:
                pending += chunk
                *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
                for raw in lines:
                    self._line(raw, name, level)
                if len(pending) > _MAX_LINE:
                    self._line(pending, name, level)
                    pending = b""
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        if pending:
            self._line(pending, name, level)

    def _line(self, raw: bytes, stream: str, level: str) -> None:
        text = raw[:_MAX_LINE].decode("utf-8", errors="replace").rstrip()
        if not text:
            return
        self._recent.append(text)
        if level == "info":
            self._log.info("server output", stream=stream, line=text)
        elif level == "debug":
            self._log.debug("server output", stream=stream, line=text)

    async def _probe(self, client: httpx.AsyncClient) -> bool:
        try:
            with anyio.fail_after(self.config.health_request_timeout_s):
                response = await client.get(self.health_url)
        except (httpx.HTTPError, TimeoutError, OSError):
            return False
        return 200 <= response.status_code < 300

    async def _wait_healthy(self, client: httpx.AsyncClient, process: Process) -> None:
        cfg = self.config
        deadline = anyio.current_time() + cfg.startup_timeout_s
        while True:
            if process.returncode is not None:
                raise _Crash(
                    f"exited with code {process.returncode} before becoming healthy",
                    process.returncode,
                )
            if await self._probe(client):
                return
            if anyio.current_time() >= deadline:
                raise _Crash(
                    f"not healthy at {self.health_url} within {cfg.startup_timeout_s:g} s "
                    f"(pid {process.pid} still running; stopped it)",
                    None,
                )
            with anyio.move_on_after(min(cfg.health_interval_s, deadline - anyio.current_time())):
                await process.wait()

    async def _watch(self, client: httpx.AsyncClient, process: Process) -> None:
        """Return never: raise :class:`_Crash` when the process exits or stops
        answering its health probe ``liveness_failures`` times in a row."""
        cfg = self.config
        if cfg.liveness_interval_s <= 0:
            code = await process.wait()
            raise _Crash(f"exited with code {code}", code)
        failures = 0
        while True:
            with anyio.move_on_after(cfg.liveness_interval_s):
                code = await process.wait()
                raise _Crash(f"exited with code {code}", code)
            if await self._probe(client):
                failures = 0
                continue
            failures += 1
            if failures >= cfg.liveness_failures and process.returncode is None:
                raise _Crash(f"failed {failures} health probes in a row at {self.health_url}", None)

    async def _stop_group(self, process: Process) -> None:
        previous = self._state
        self._state = ServerState.STOPPING
        began = anyio.current_time()
        killed = await stop_process_group(process, self.config.stop_grace_s)
        self._log.info(
            "managed server stopped",
            pid=process.pid,
            exit_code=process.returncode,
            stop_s=round(anyio.current_time() - began, 2),
            killed=killed,
        )
        self._state = previous
