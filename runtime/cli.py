"""The ``agentrt`` command line (runtime roof).

Owns argument parsing, the one output layer (the only code in agentrt that
prints), logging set-up for the process, and exit codes: 0 success, 1 a
runtime failure (a backend, the actor system), 2 a user error (bad flags, a
bad configuration, an unknown model), 130 interrupted.

Commands:

- ``agentrt run TASK``: the main job (see ``agentrt.runtime.single_turn``);
- ``agentrt sim-server ...``: the simulated model server of
  ``agentrt.runtime.testing.sim_server`` (imported only when asked for);
- ``agentrt frontier [--simulate | --tasks FILE]``: the cost-success frontier
  of the routing policies (``agentrt.runtime.routing.frontier``).

The roof may import anything below it; nothing imports this module.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO, final

import anyio

from agentrt._version import __version__
from agentrt.protocols import RunResult, SamplingParams, to_builtins
from agentrt.runtime.actors import ActorError
from agentrt.runtime.errors import AgentrtError, ConfigError, UserError
from agentrt.runtime.log import configure_logging
from agentrt.runtime.models.registry import ModelRegistry

__all__ = ["main"]

_PROG = "agentrt"


class _UsageError(Exception):
    """A command line argparse rejected (reported as one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


@final
class Output:
    """Everything the CLI shows: answers and results on stdout, problems on
    stderr.  No other code in agentrt prints."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self._stdout = stdout or sys.stdout
        self._stderr = stderr or sys.stderr

    def line(self, text: str = "") -> None:
        print(text, file=self._stdout)

    def json(self, value: object) -> None:
        print(json.dumps(value, indent=2, ensure_ascii=False), file=self._stdout)

    def problem(self, text: str) -> None:
        print(f"{_PROG}: {text}", file=self._stderr)

    def run_result(self, result: RunResult) -> None:
        """Each rollout's answer (or failure), the chosen answer, usage."""
        for summary in result.summaries:
            if summary.answer is None and summary.failure_modes:
                self.line(f"[{summary.rollout_id}] failed: {'; '.join(summary.failure_modes)}")
            else:
                self.line(f"[{summary.rollout_id}] {summary.answer or ''}")
        if len(result.summaries) > 1 and result.answer is not None:
            self.line(f"answer: {result.answer}")
        cost = result.cost
        self.line(
            f"usage: {cost.usage.prompt_tokens} prompt + {cost.usage.completion_tokens} "
            f"completion tokens, {cost.model_calls} model calls, {cost.wall_seconds:.2f} s"
        )


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0911 - one exit code per outcome
    """Run the ``agentrt`` command; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    out = Output()
    delegated = _delegated_command(args_list[:1])
    if delegated is not None:
        # Its own parser owns its flags (and its --help).
        try:
            return delegated(args_list[1:])
        except SystemExit as exit_:  # its --help, or its own usage errors
            return exit_.code if isinstance(exit_.code, int) else 1
    parser = _build_parser()
    try:
        args = parser.parse_args(args_list)
    except _UsageError as error:
        out.problem(str(error).removeprefix(f"{_PROG}: "))
        return 2
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    if args.version:
        out.line(f"{_PROG} {__version__}")
        return 0
    if args.command is None:
        out.problem(f"no command given (see `{_PROG} --help`)")
        return 2
    configure_logging(args.log_level)
    try:
        code: int = args.handler(args, out)
    except UserError as error:
        out.problem(_one_line(error))
        return 2
    except (AgentrtError, ActorError) as error:
        out.problem(_one_line(error))
        return 1
    except KeyboardInterrupt:
        out.problem("interrupted")
        return 130
    return code


def _delegated_command(head: list[str]) -> Callable[[list[str]], int] | None:
    """Commands whose module parses its own arguments (imported on demand)."""
    if head == ["sim-server"]:
        from agentrt.runtime.testing import sim_server

        return sim_server.main
    if head == ["frontier"]:
        from agentrt.runtime.routing.frontier import frontier_main

        return frontier_main
    return None


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=_PROG, description="agentrt: multi-agent runtime with inference-time scaling"
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (logs go to stderr; default WARNING)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="answer TASK with N parallel rollouts (embedded model by default)",
        description="Answer TASK with N rollouts, each an actor asking the model once.",
    )
    run.add_argument("task", metavar="TASK", help="the task or question")
    run.add_argument(
        "--rollouts", type=_positive_int, default=1, help="parallel rollouts (default 1)"
    )
    run.add_argument("--model", help="a backend or model name from the configuration")
    run.add_argument(
        "--max-tokens", type=_positive_int, default=256, help="completion tokens per rollout (256)"
    )
    run.add_argument(
        "--temperature", type=_temperature, default=0.7, help="sampling temperature (0.7)"
    )
    run.add_argument("--seed", type=int, default=None, help="sampling seed (rollout i uses seed+i)")
    run.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        help="deadline in seconds for each rollout's answer (300)",
    )
    run.add_argument(
        "--config",
        type=Path,
        help="a TOML or JSON file with a [models] section (default: the embedded model)",
    )
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.set_defaults(handler=_run_command)

    # Listed for --help; main() hands its arguments to the server's own parser.
    commands.add_parser(
        "sim-server",
        help="run the simulated OpenAI/SGLang-compatible model server",
        add_help=False,
    )
    commands.add_parser(
        "frontier",
        help="print the cost-success frontier of the routing policies over a task set",
        add_help=False,
    )
    return parser


def _run_command(args: argparse.Namespace, out: Output) -> int:
    from agentrt.runtime.single_turn import run_single_turn

    registry = _load_registry(args.config)
    sampling = SamplingParams(
        temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    result = anyio.run(
        lambda: run_single_turn(
            args.task,
            registry=registry,
            model=args.model,
            rollouts=args.rollouts,
            sampling=sampling,
            timeout_s=args.timeout,
        ),
        backend="asyncio",
        backend_options=_loop_options(),
    )
    if args.json:
        out.json(to_builtins(result))
    else:
        out.run_result(result)
    if result.status != "succeeded":
        if not args.json:
            out.problem(f"run {result.run_id} {result.status}: {result.error or 'no answer'}")
        return 1
    return 0


def _load_registry(path: Path | None) -> ModelRegistry:
    if path is None:
        return ModelRegistry()
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the configuration: {error.strerror}", where=where) from None
    data: Any
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"not valid {_format_of(path)}: {error}", where=where) from None
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a table/object", where=where)
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError("must be a table/object", where=f"{where}: models")
    return ModelRegistry.from_mapping(models, where=f"{where}: models")


def _format_of(path: Path) -> str:
    return "JSON" if path.suffix == ".json" else "TOML"


def _loop_options() -> dict[str, Any]:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _temperature(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2, got {text}")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value
