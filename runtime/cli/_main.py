"""The ``agentrt`` command line (runtime roof): argument parsing, the one
output layer (the only code in agentrt that prints), the process's logging
set-up, and exit codes (0 success, 1 a runtime failure, 2 a user error, 130
interrupted).  Commands: ``run``, ``eval``, ``aggregate``,
``serve``, ``mcp``, ``frontier``, ``sim-server``.

The roof may import anything below it; nothing imports this module.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, final

import anyio

from agentrt._version import __version__
from agentrt.runtime.cli._flags import add_placement_arguments
from agentrt.runtime.kernel._errors import AgentrtError, UserError

if TYPE_CHECKING:
    from agentrt.agents._recording import EventSink
    from agentrt.protocols._run import RunResult
    from agentrt.runtime.cli._progress import ProgressDisplay
    from agentrt.runtime.cli._tally import RolloutTally

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

    def is_terminal(self, *, on_stderr: bool = False) -> bool:
        """Whether stdout (or stderr) is a terminal."""
        stream = self._stderr if on_stderr else self._stdout
        isatty = getattr(stream, "isatty", None)
        return bool(isatty is not None and isatty())

    def progress(
        self, *, cap_tokens: int | None, on_stderr: bool = False
    ) -> AbstractAsyncContextManager[ProgressDisplay]:
        """A live progress display of a run (``agentrt.runtime.cli._progress``)
        on stdout, or on stderr (keeping stdout for ``--json``)."""
        from rich.console import Console

        from agentrt.runtime.cli._progress import live_progress

        stream = self._stderr if on_stderr else self._stdout
        return live_progress(Console(file=stream), cap_tokens=cap_tokens)

    def token_printer(self, *, on_stderr: bool = False) -> EventSink:
        """A sink writing the models' text as it comes (``--stream`` without
        the live display) on stdout, or on stderr (``--json``)."""
        from agentrt.runtime.cli._progress import TokenPrinter

        return TokenPrinter(self._stderr if on_stderr else self._stdout)

    def run_result(self, result: RunResult, tally: RolloutTally) -> None:
        """Each rollout's answer (or why it has none) and how it got there,
        the chosen answer, then usage and cost."""
        from agentrt.protocols._ids import short_rollout_id  # not loaded for --help

        for summary in result.summaries:
            rollout = short_rollout_id(result.run_id, summary.rollout_id)
            if summary.answer is None:
                self.line(f"[{rollout}] failed: {'; '.join(summary.failure_modes)}")
            else:
                self.line(f"[{rollout}] {summary.answer.strip()}")
            line = tally.rollouts.get(summary.rollout_id)
            if line is not None:
                self.line(
                    f"  {tally.agent}: {line.status} ({line.stop_reason}), "
                    f"{line.steps} step{'s' * (line.steps != 1)}, "
                    f"{line.tool_calls} tool call{'s' * (line.tool_calls != 1)}, "
                    f"{line.model_calls} model calls in all"
                )
        if len(result.summaries) > 1 and result.answer is not None:
            self.line(f"answer: {result.answer}")
        if result.stopped is not None:
            self.line(f"run {result.status}, {result.stopped.describe()}")
        from agentrt.runtime.budget._pricing import usd_text

        cost = result.cost
        money = usd_text(cost.usd)  # none when no model of the run has a price
        cached = cost.usage.cached_prompt_tokens  # the server's prefix cache served these
        self.line(
            f"usage: {cost.usage.prompt_tokens} prompt{f' ({cached} cached)' if cached else ''}"
            f" + {cost.usage.completion_tokens} completion tokens, {cost.model_calls} model calls, "
            f"{money + ', ' if money else ''}{cost.wall_seconds:.2f} s"
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
    # Imported once a command runs: ``--help`` and usage errors need neither.
    from agentrt.runtime.kernel._actor_errors import ActorError
    from agentrt.runtime.observe._log import configure_logging

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


def _delegated_command(  # noqa: PLR0911 - one return per command
    head: list[str],
) -> Callable[[list[str]], int] | None:
    """Commands whose module parses its own arguments (imported on demand)."""
    if head == ["sim-server"]:
        from agentrt.runtime.testing.sim import _sim_server as sim_server

        return sim_server.main
    if head == ["eval"]:
        return _eval_main
    if head == ["aggregate"]:
        from agentrt.runtime.cli._aggregate_command import aggregate_main

        return aggregate_main
    if head == ["serve"]:
        from agentrt.runtime.cli._serve_command import serve_main

        return serve_main
    if head == ["mcp"]:
        from agentrt.runtime.serve.mcp._mcp_stdio import mcp_main

        return mcp_main
    if head == ["frontier"]:
        from agentrt.runtime.evaluation._frontier import frontier_main

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
        help="answer TASK with an agent or agent hierarchy (embedded model by default)",
        description=(
            "Answer TASK with N parallel rollouts of an agent: the default agent (a "
            "calculator, small limits), a YAML spec (--agent x.yaml) or an agent named in "
            "the configuration's [agents] table."
        ),
    )
    run.add_argument("task", metavar="TASK", help="the task or question")
    run.add_argument(
        "--agent",
        "--spec",
        dest="agent",
        metavar="SPEC",
        help="a spec file (x.yaml, x.yaml#name) or a name from [agents] in --config",
    )
    run.add_argument(
        "--rollouts", type=_positive_int, default=1, help="parallel rollouts (default 1)"
    )
    run.add_argument("--model", help="the model for agents that name none (a backend or model)")
    run.add_argument(
        "--max-steps", type=_positive_int, help="model calls per rollout, for every agent"
    )
    run.add_argument(
        "--max-tokens",
        type=_positive_int,
        help="completion tokens per model call, for every agent (default agent: 256)",
    )
    run.add_argument(
        "--temperature", type=_temperature, help="sampling temperature, for every agent"
    )
    run.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="SERVER",
        help="give the entry agent an MCP server's tools: 'CMD ARGS' (stdio) or a URL",
    )
    run.add_argument(
        "--budget-tokens",
        type=_positive_int,
        help="hard cap on the tokens of the whole run (every rollout and sub-agent)",
    )
    run.add_argument(
        "--max-usd",
        type=_positive_float,
        help="hard cap on the cost of the whole run in USD (prices: [prices] in --config, "
        "else the genai-prices database)",
    )
    run.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        help="wall-clock cap in seconds on the whole run, aggregation included (300)",
    )
    run.add_argument(
        "--config",
        type=Path,
        help="agentrt.toml: [models], [agents], [mcp]... (default: the embedded model)",
    )
    add_placement_arguments(run)
    run.add_argument(
        "--keep-workspaces",
        action="store_true",
        help="keep the run's sandbox workspaces for debugging (printed on stderr; default: "
        "deleted when the run ends); also keep_workspaces = true in --config",
    )
    run.add_argument(
        "--aggregate",
        metavar="NAME",
        help="how the rollouts' answers are aggregated: majority, weighted, "
        "best_of_n, rtv, pdr, aggagent, compressed (default: majority)",
    )
    run.add_argument(
        "--aggregate-option",
        action="append",
        default=[],
        type=_option,
        metavar="KEY=VALUE",
        help="an option of the aggregator, e.g. g=2 or v=8 for rtv (repeatable)",
    )
    run.add_argument(
        "--confidence",
        type=_confidence,
        metavar="P",
        help="adaptive N: --rollouts becomes a cap; start --min-rollouts and launch more "
        "until the leading answer leads with probability P (0.5 < P < 1)",
    )
    run.add_argument(
        "--min-rollouts",
        type=_positive_int,
        default=4,
        metavar="N",
        help="with --confidence: rollouts run at once (4)",
    )
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.add_argument(
        "--export",
        type=Path,
        metavar="OUT",
        help="write the run's trajectories and summaries (.jsonl, or .parquet with pyarrow; "
        "docs/evaluation.md)",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a live display of the rollouts, the aggregation and the budget (default: on "
        "when the output is a terminal; on stderr with --json)",
    )
    run.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the models' text as it is generated: in the live display, or written out "
        "as it comes without one (default: with the live display)",
    )
    run.set_defaults(handler=_run_command)

    key = commands.add_parser(
        "key",
        help="make an API key for the daemon: prints the key (once) and the "
        "[server.keys.NAME] table to add to agentrt.toml, which holds only its SHA-256",
    )
    key.add_argument("name", metavar="NAME", help="the key's name (its runs are owned by it)")
    key.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        help="what the key may do: runs:create, runs:read, runs:read_all or admin "
        "(repeat; default: runs:create and runs:read)",
    )
    key.add_argument(
        "--rate-per-minute", type=_positive_int, help="requests per minute (default: unlimited)"
    )
    key.add_argument(
        "--max-active-runs",
        type=_positive_int,
        help="the key's unfinished runs at once (default: the daemon's limits only)",
    )
    key.set_defaults(handler=_key_command)

    # Listed for --help; main() hands its arguments to the server's own parser.
    commands.add_parser(
        "sim-server",
        help="run the simulated OpenAI/SGLang-compatible model server",
        add_help=False,
    )
    commands.add_parser(
        "eval",
        help="evaluate aggregators over a JSONL task set from one pool of rollouts per task: "
        "pass@k, pass^k, oracle@k, cost, paired comparisons",
        add_help=False,
    )
    commands.add_parser(
        "aggregate",
        help="re-aggregate stored rollouts (an exported file or the daemon's store) with any "
        "aggregator, running no rollout",
        add_help=False,
    )
    commands.add_parser(
        "frontier",
        help="print the cost-success frontier of the routing policies over a task set",
        add_help=False,
    )
    commands.add_parser(
        "serve",
        help="run the daemon: HTTP + SSE API, OpenAI-compatible endpoint, MCP, metrics, web page",
        add_help=False,
    )
    commands.add_parser(
        "mcp",
        help="serve agentrt over MCP on stdin/stdout (for IDEs that launch a command)",
        add_help=False,
    )
    return parser


def _key_command(args: argparse.Namespace, out: Output) -> int:
    from pydantic import ValidationError

    from agentrt.runtime.config._config_file import ApiKeyConfig, ServerConfig
    from agentrt.runtime.serve._keys import new_key

    key, sha256 = new_key()
    scopes = list(dict.fromkeys(args.scopes or ["runs:create", "runs:read"]))
    table = {"sha256": sha256, "scopes": scopes}
    if args.rate_per_minute is not None:
        table["rate_per_minute"] = args.rate_per_minute
    if args.max_active_runs is not None:
        table["max_active_runs"] = args.max_active_runs
    try:  # checked as the daemon will read it: a bad scope fails here, not at ``serve``
        ServerConfig(keys={args.name: ApiKeyConfig.model_validate(table)})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        out.problem(f"{first['msg'].removeprefix('Value error, ')} (at {where})")
        return 2
    # The key on stderr, the table on stdout: ``agentrt key ci >> agentrt.toml``
    # puts the table in the file and the key on the terminal only.
    out.problem(f"the key (shown once; the daemon keeps only its SHA-256): {key}")
    out.line()
    out.line(f"[server.keys.{args.name}]")
    for name, value in table.items():
        out.line(f"{name} = {json.dumps(value)}")
    return 0


def _run_command(args: argparse.Namespace, out: Output) -> int:
    from agentrt.protocols._codec import to_builtins
    from agentrt.protocols._run import Budget, ScalingSpec
    from agentrt.runtime.cli._run_command import agent_specs, open_runtime, with_default_model
    from agentrt.runtime.cli._tally import RolloutTally
    from agentrt.runtime.config._config_file import load_config
    from agentrt.runtime.evaluation._trajectory_data import TrajectoryRecorder, export_run
    from agentrt.tools.sandbox._workspaces import run_directory

    config = load_config(args.config).with_placement(args.placement, args.ray_address)
    if args.model is not None:
        config = with_default_model(config, args.model)
    if args.keep_workspaces:
        kept = config.runtime.model_copy(update={"keep_workspaces": True})
        config = config.model_copy(update={"runtime": kept})
    agent = agent_specs(
        args.agent,
        config,
        max_steps=args.max_steps,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        mcp=tuple(args.mcp),
    )
    budget = Budget(
        max_tokens=args.budget_tokens, max_usd=args.max_usd, max_wall_seconds=args.timeout
    )
    scaling = ScalingSpec(
        rollouts=args.rollouts,
        aggregate=args.aggregate or "majority",
        options=dict(args.aggregate_option),
        confidence=args.confidence,
        min_rollouts=args.min_rollouts,
    )
    tallies: list[RolloutTally] = []

    # With --json the display goes to stderr: stdout stays one JSON document.
    show = args.progress
    if show is None:
        show = out.is_terminal(on_stderr=args.json)
    stream = show if args.stream is None else args.stream

    recorders: list[TrajectoryRecorder] = []  # --export: the run's trajectories

    async def execute(events: EventSink | None) -> RunResult:
        if args.export is not None:
            recorders.append(TrajectoryRecorder(events))
            events = recorders[-1]
        tally = RolloutTally(events)
        tallies.append(tally)
        async with open_runtime(config, agent) as rt:
            return await rt.run(
                args.task, scaling=scaling, budget=budget, events=tally, tokens=stream
            )

    async def runner() -> RunResult:
        if not show:
            return await execute(out.token_printer(on_stderr=args.json) if stream else None)
        async with out.progress(cap_tokens=args.budget_tokens, on_stderr=args.json) as display:
            return await execute(display)

    result = anyio.run(runner, backend="asyncio", backend_options=_loop_options())
    if args.export is not None:
        export_run(args.export, args.task, result, recorders[0])
    kept_at = run_directory(result.run_id)
    if config.runtime.keep_workspaces and kept_at.is_dir():
        out.problem(f"workspaces kept in {kept_at}")
    if args.json:
        out.json(to_builtins(result))
    else:
        out.run_result(result, tallies[0])
    if result.status != "succeeded":
        if not args.json:
            out.problem(f"run {result.run_id} {result.status}: {result.error or 'no answer'}")
        return 1
    return 0


def _eval_main(argv: list[str]) -> int:
    """``agentrt eval``: its own parser (``agentrt.runtime.evaluation._eval``)."""
    from agentrt.runtime.cli._run_command import eval_runner
    from agentrt.runtime.evaluation._eval import build_parser, eval_command

    args = build_parser(f"{_PROG} eval").parse_args(argv)
    out = Output()
    from agentrt.runtime.observe._log import configure_logging

    configure_logging("WARNING")
    try:
        anyio.run(
            lambda: eval_command(args, eval_runner),
            backend="asyncio",
            backend_options=_loop_options(),
        )
    except UserError as error:
        out.problem(_one_line(error))
        return 2
    except AgentrtError as error:
        out.problem(_one_line(error))
        return 1
    return 0


def _option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; the value read as JSON when it parses (numbers, true), else text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


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


def _confidence(text: str) -> float:
    value = _float(text)
    if not 0.5 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be above 0.5 and below 1, got {text}")
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
