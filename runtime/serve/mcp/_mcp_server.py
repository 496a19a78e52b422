"""The daemon's MCP surface: its runs as MCP tools and resources.

Owns ``build_mcp_server``: a ``ToolServer`` over a ``RunManager`` with the
tools ``run_agent`` (submit a run, follow it with an MCP progress
notification per finished rollout and per aggregation round, return the
answer, the run id and the cost; the run's MCP elicitations are put to
the calling client when it declared the capability), ``list_agents``, ``get_run`` and
``cancel_run``, and the resources of ``mcp_resources`` (agents, runs,
trajectories, summaries).  ``mcp_asgi`` wraps it as the streamable HTTP
endpoint the daemon serves at ``/mcp`` (Host/Origin validation always on);
``mcp_stdio`` serves it over stdio for ``agentrt mcp``.

The roof: may import every layer; only the daemon's modules import it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, final

import anyio
import anyio.abc
import msgspec

from agentrt.aggregators._compose import NAMES as AGGREGATOR_NAMES
from agentrt.protocols._api import TERMINAL_STATUSES, AgentList, ElicitationAnswer, RunInfo
from agentrt.protocols._events import (
    ElicitationRequested,
    ErrorRaised,
    RolloutFinished,
    RolloutStarted,
    VoteCast,
)
from agentrt.protocols._run import Budget, RunRequest, ScalingSpec
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.budget._pricing import usd_text
from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve._bridge import RunService
from agentrt.runtime.serve.mcp._mcp_resources import run_resources, run_uri
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools.hosting._hosting_config import HttpServeConfig, ToolServerConfig
from agentrt.tools.hosting._tool_server import ToolServer
from agentrt.tools.hosting._transports import HttpMount, loopback_security, streamable_http_mount

log = get_logger(__name__)

#: How long ``run_agent`` waits for a run by default before answering with
#: its id (the run goes on; ``get_run`` tells how it ended).
DEFAULT_WAIT_S: Final = 600.0
#: The longest wait a caller may ask for.
MAX_WAIT_S: Final = 3600.0
#: How long cancelling a run may take when a waiting call is cancelled.
_CANCEL_TIMEOUT_S: Final = 30.0
#: Vote counts a progress message shows (a best-of-N round scores every rollout).
_TALLY_SHOWN: Final = 8

INSTRUCTIONS: Final = (
    "agentrt runs agents with inference-time scaling: run_agent answers a task with N "
    "parallel rollouts of an agent and aggregates them (majority vote, tournament, "
    "distill-refine...).  list_agents shows the agents; get_run and cancel_run take the "
    "run id run_agent returns.  Runs, trajectories and summaries are resources under "
    "agentrt://runs."
)


# -- run_agent's arguments ----------------------------------------------------------


class RunAgentArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``run_agent`` takes (its JSON schema is ``RUN_AGENT_SCHEMA``)."""

    task: str
    agent: str = "default"
    rollouts: int | None = None
    aggregate: str | None = None
    aggregate_options: dict[str, Any] | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    max_model_calls: int | None = None
    max_wall_seconds: float | None = None
    wait: bool = True
    wait_timeout_s: float = DEFAULT_WAIT_S


RUN_AGENT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "The task or question."},
        "agent": {
            "type": "string",
            "description": "An agent name from list_agents (default: the daemon's default agent).",
        },
        "rollouts": {
            "type": "integer",
            "minimum": 1,
            "description": "Parallel rollouts (default: the daemon's configured number).",
        },
        "aggregate": {
            "type": "string",
            "enum": list(AGGREGATOR_NAMES),
            "description": "How to combine the rollouts (default: the daemon's configured one).",
        },
        "aggregate_options": {
            "type": "object",
            "description": 'Options of the aggregator, e.g. {"g": 2, "v": 8} for rtv.',
        },
        "max_tokens": {"type": "integer", "minimum": 0, "description": "Token cap of the run."},
        "max_usd": {"type": "number", "minimum": 0, "description": "Cost cap in US dollars."},
        "max_model_calls": {"type": "integer", "minimum": 0, "description": "Model-call cap."},
        "max_wall_seconds": {"type": "number", "minimum": 0, "description": "Wall-time cap."},
        "wait": {
            "type": "boolean",
            "default": True,
            "description": "Wait for the answer (with progress notifications); false returns "
            "the run id at once.",
        },
        "wait_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_WAIT_S,
            "default": DEFAULT_WAIT_S,
            "description": "The longest to wait; then the run id comes back and the run goes on.",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}

_RUN_ID_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"run_id": {"type": "string", "description": "The id run_agent returned."}},
    "required": ["run_id"],
    "additionalProperties": False,
}


class _RunIdArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    run_id: str


_ArgsT = TypeVar("_ArgsT", bound=msgspec.Struct)


def _decode(arguments: Mapping[str, Any], type_: type[_ArgsT], tool: str) -> _ArgsT:
    try:
        return msgspec.convert(dict(arguments), type_, strict=False)
    except msgspec.ValidationError as exc:
        raise ToolError(f"{tool}: invalid arguments: {exc}") from None


# -- the tools ------------------------------------------------------------------------

Body = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]


@final
@dataclass(frozen=True, slots=True)
class _ManagerTool:
    """A ``Tool`` whose body talks to the run manager."""

    spec: ToolSpec
    body: Body = field(repr=False)

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            return await self.body(arguments, context)
        except ApiProblem as problem:
            raise ToolError(f"{self.spec.name}: {problem}") from None


def _json_output(value: Any, *, text: str | None = None, is_error: bool = False) -> ToolOutput:
    plain = msgspec.to_builtins(value)
    shown = text if text is not None else msgspec.json.encode(plain).decode()
    return ToolOutput(content=[ToolContent(text=shown)], is_error=is_error, structured=plain)


def _cost_line(info: RunInfo) -> str:
    cost = info.cost
    usage = cost.usage
    return (
        f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens, "
        f"{cost.model_calls} model calls, "
        f"{money + ', ' if (money := usd_text(cost.usd)) else ''}{cost.wall_seconds:.2f} s"
    )


@final
class _RunFollower:
    """Turns a run's events into MCP progress (and log) notifications:
    one per finished top-level rollout, one per aggregation round."""

    def __init__(self, context: ToolContext, rollouts: int) -> None:
        self._notify = context.notify
        self._rollouts = rollouts
        self._children: set[str] = set()
        self._answers: dict[str, str | None] = {}
        self._finished = 0
        self.sent = 0

    async def see(self, event: object) -> None:
        match event:
            case RolloutStarted(rollout_id=rid, parent_rollout_id=parent) if parent is not None:
                self._children.add(rid)
            case RolloutFinished(rollout_id=rid, status=status, answer=answer, stop_reason=why) if (
                rid not in self._children
            ):
                self._finished += 1
                self._answers[rid] = answer
                shown = (
                    f"no answer ({why or status})"
                    if answer is None
                    else f"answer {_clip(answer)!r}"
                )
                # Refinement rounds (PDR) run rollouts beyond the N asked for.
                count = (
                    f"{self._finished}/{self._rollouts}"
                    if self._finished <= self._rollouts
                    else f"{self._finished} finished"
                )
                await self._progress(f"rollout {rid} {status} ({count}): {shown}")
            case VoteCast(aggregator=name, round=round_, winner=winner, votes=votes):
                shown_votes = [f"{k}={v}" for k, v in list(votes.items())[:_TALLY_SHOWN]]
                if len(votes) > _TALLY_SHOWN:
                    shown_votes.append(f"+{len(votes) - _TALLY_SHOWN} more")
                tally = ", ".join(shown_votes)
                answer = self._answers.get(winner or "")
                chosen = "no winner" if winner is None else f"winner {winner}"
                if answer is not None:
                    chosen += f" ({_clip(answer)!r})"
                suffix = f"; votes {tally}" if tally else ""
                await self._progress(f"{name} round {round_}: {chosen}{suffix}")
            case ErrorRaised(where=where, message=message, fatal=fatal):
                if self._notify is not None:
                    level = "error" if fatal else "warning"
                    await self._notify(
                        "log", {"level": level, "logger": "agentrt", "data": f"{where}: {message}"}
                    )
            case _:
                pass

    async def _progress(self, message: str) -> None:
        self.sent += 1
        if self._notify is not None:
            # One step per notification: rounds are not known in advance, so
            # no total; the value only ever grows, as MCP requires.
            await self._notify("progress", {"progress": self.sent, "message": message})


@final
class _IdeAsker:
    """Puts a run's MCP elicitations to the MCP client that started it
    (``elicitation/create`` on the ``run_agent`` call's stream) and relays
    the answer to the run.  REST and the web page can answer the same
    question: the first answer wins, a later one is dropped.  A client that
    did not declare the elicitation capability is not asked; it gets a
    ``notifications/message`` saying where the question can be answered."""

    def __init__(self, manager: RunService, run_id: str, context: ToolContext) -> None:
        self._manager = manager
        self._run_id = run_id
        self._peer = context.peer
        self._notify = context.notify

    def forward(self, group: anyio.abc.TaskGroup, question: ElicitationRequested) -> None:
        group.start_soon(self._ask, question)

    async def _ask(self, question: ElicitationRequested) -> None:
        if self._peer is None:
            return
        message, schema = _as_form(question)
        where = f"POST /v1/runs/{self._run_id}/elicitations/{question.question_id}"
        try:
            reply = await self._peer.elicit(message, schema)
        except ToolError as exc:
            # No capability, no back channel, or the client refused: the
            # question still waits for REST or the web page.
            log.info("mcp_elicitation_not_forwarded", run_id=self._run_id, reason=str(exc))
            if self._notify is not None:
                await self._notify(
                    "log",
                    {
                        "level": "warning",
                        "logger": "agentrt",
                        "data": f"{question.server} asks: {question.message} (answer with "
                        f"{where} or on the run's web page)",
                    },
                )
            return
        answer = msgspec.convert(
            {"action": reply.action, "content": reply.content}, ElicitationAnswer
        )
        try:
            await self._manager.answer_elicitation(self._run_id, question.question_id, answer)
        except ApiProblem:
            # Answered first over REST or the web page, or timed out (404, 409).
            log.info("mcp_elicitation_answer_late", run_id=self._run_id)


def _as_form(question: ElicitationRequested) -> tuple[str, dict[str, Any]]:
    """The message and flat form schema an MCP client is asked: ``form``
    questions as they are; ``approval`` and ``url`` as a form without
    fields (accept approves, or says the page was visited)."""
    empty: dict[str, Any] = {"type": "object", "properties": {}}
    prefix = f"[{question.server}] " if question.server else ""  # none: an approval of ours
    match question.mode:
        case "form" if question.requested_schema is not None:
            return prefix + question.message, dict(question.requested_schema)
        case "approval":
            arguments = msgspec.json.encode(question.arguments or {}).decode()
            return (
                f"{prefix}{question.message}\nRun tool {question.tool!r} with {arguments}?",
                empty,
            )
        case "url":
            return f"{prefix}{question.message}\nOpen {question.url}", empty
        case _:
            return prefix + question.message, empty


def _clip(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@final
class _McpTools:
    """The bodies of the four tools, over one manager."""

    def __init__(self, manager: RunService) -> None:
        self._manager = manager

    def request(self, args: RunAgentArgs) -> RunRequest:
        """The run ``args`` ask for; a ``ToolError`` naming the field when a
        value is out of range (``rollouts`` 0, a negative cap)."""
        defaults = self._manager.config.runtime
        aggregate = args.aggregate or defaults.aggregate
        if args.aggregate_options is not None:
            options = args.aggregate_options
        else:
            options = defaults.aggregate_options if aggregate == defaults.aggregate else {}
        try:
            return RunRequest(
                task=args.task,
                agent=args.agent,
                scaling=ScalingSpec(
                    rollouts=args.rollouts if args.rollouts is not None else defaults.rollouts,
                    aggregate=aggregate,
                    options=dict(options),
                ),
                budget=Budget(
                    max_tokens=args.max_tokens,
                    max_usd=args.max_usd,
                    max_model_calls=args.max_model_calls,
                    max_wall_seconds=args.max_wall_seconds,
                ),
                metadata={"via": "mcp"},
            )
        except (TypeError, ValueError) as exc:
            raise ToolError(f"run_agent: invalid arguments: {exc}") from None

    async def run_agent(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        args = _decode(arguments, RunAgentArgs, "run_agent")
        if not 0 < args.wait_timeout_s <= MAX_WAIT_S:
            raise ToolError(
                f"run_agent: wait_timeout_s must be in (0, {MAX_WAIT_S:g}], "
                f"got {args.wait_timeout_s:g}"
            )
        info = await self._manager.submit(self.request(args))
        run_id = info.run_id
        if not args.wait:
            return _json_output(
                info, text=f"run {run_id} submitted ({info.status}); see {run_uri(run_id)}"
            )
        follower = _RunFollower(context, info.rollouts)
        asker = _IdeAsker(self._manager, run_id, context)
        try:
            with anyio.move_on_after(args.wait_timeout_s):
                async with anyio.create_task_group() as questions:
                    async for event in self._manager.follow(run_id):
                        if isinstance(event, ElicitationRequested):
                            asker.forward(questions, event)
                        await follower.see(event)
                    # The run ended: withdraw the questions still open.
                    questions.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # The client gave up on the call (or the server is stopping):
            # stop the work it asked for, unless the daemon is draining, in
            # which case the run is checkpointed and resumes on restart.
            if self._manager.accepting:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_TIMEOUT_S):
                    await self._manager.cancel(run_id)
                log.info("mcp_run_cancelled_with_call", run_id=run_id)
            raise
        final = await self._manager.get(run_id) or info
        return self._answer(final)

    @staticmethod
    def _answer(info: RunInfo) -> ToolOutput:
        run_id = info.run_id
        where = f"resources: {run_uri(run_id)}, {run_uri(run_id)}/summaries"
        if info.status not in TERMINAL_STATUSES:
            text = (
                f"run {run_id} is still {info.status}; it goes on.  Call get_run with "
                f"run_id {run_id!r} later.\n{where}"
            )
            return _json_output(info, text=text)
        head = info.answer if info.status == "succeeded" and info.answer is not None else None
        if head is None:
            head = f"run {run_id} {info.status}: {info.error or 'no answer'}"
        summary = (
            f"run {run_id} {info.status} · {info.rollouts} rollout"
            f"{'s' * (info.rollouts != 1)} · {info.aggregate} · {_cost_line(info)}"
        )
        return _json_output(
            info, text=f"{head}\n\n{summary}\n{where}", is_error=info.status != "succeeded"
        )

    async def list_agents(self, arguments: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        if arguments:
            raise ToolError(f"list_agents takes no arguments, got {sorted(arguments)}")
        agents = self._manager.agents()
        lines = [
            f"{a.name}{' (default)' if a.default else ''}: {a.description or a.kind}"
            for a in agents
        ]
        return _json_output(AgentList(agents=agents), text="\n".join(lines))

    async def get_run(self, arguments: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        run_id = _decode(arguments, _RunIdArgs, "get_run").run_id
        detail = await self._manager.detail(run_id)
        if detail is None:
            raise ToolError(f"get_run: no run {run_id!r}")
        return _json_output(detail)

    async def cancel_run(self, arguments: Mapping[str, Any], _ctx: ToolContext) -> ToolOutput:
        run_id = _decode(arguments, _RunIdArgs, "cancel_run").run_id
        with anyio.fail_after(_CANCEL_TIMEOUT_S):
            info = await self._manager.cancel(run_id)
        if info is None:
            raise ToolError(f"cancel_run: no run {run_id!r}")
        return _json_output(info, text=f"run {run_id} is {info.status}")

    def tools(self) -> list[_ManagerTool]:
        def spec(name: str, description: str, parameters: dict[str, Any]) -> ToolSpec:
            return ToolSpec(name=name, description=description, parameters=parameters)

        no_args: dict[str, Any] = {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        }
        return [
            _ManagerTool(
                spec(
                    "run_agent",
                    "Answer a task with an agentrt agent: N parallel rollouts, aggregated.  "
                    "Reports progress per finished rollout and per aggregation round; returns "
                    "the answer, the run id and the cost (or just the run id with wait=false).",
                    RUN_AGENT_SCHEMA,
                ),
                self.run_agent,
            ),
            _ManagerTool(
                spec("list_agents", "The agents this daemon runs.", no_args), self.list_agents
            ),
            _ManagerTool(
                spec(
                    "get_run",
                    "A run in full: status, request, rollouts and (when done) the result.",
                    _RUN_ID_SCHEMA,
                ),
                self.get_run,
            ),
            _ManagerTool(
                spec("cancel_run", "Cancel a run; returns its final state.", _RUN_ID_SCHEMA),
                self.cancel_run,
            ),
        ]


def build_mcp_server(manager: RunService, *, name: str = "agentrt") -> ToolServer:
    """The daemon's MCP server over ``manager`` (see the module docstring).

    Tool calls have no server-side deadline: ``run_agent`` bounds its own
    wait (``wait_timeout_s``) and a client may cancel any call."""
    resources, templates = run_resources(manager)
    return ToolServer(
        name,
        tools=_McpTools(manager).tools(),
        resources=resources,
        resource_templates=templates,
        instructions=INSTRUCTIONS,
        config=ToolServerConfig(call_timeout_s=None),
    )


def mcp_asgi(
    manager: RunService,
    *,
    port: int | None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    http: HttpServeConfig | None = None,
) -> HttpMount:
    """The MCP endpoint over ``manager`` for the daemon to route ``/mcp`` to:
    ``(app, lifespan)``.  Host/Origin validation is always on: the loopback
    names with ``port`` (any port when ``None``) plus ``allowed_hosts``, and
    their ``http://`` origins plus ``allowed_origins``; a foreign ``Host``
    gets 421, a foreign ``Origin`` 403."""
    security = loopback_security(port, extra_hosts=allowed_hosts, extra_origins=allowed_origins)
    return streamable_http_mount(build_mcp_server(manager), http, security=security)


__all__ = [
    "DEFAULT_WAIT_S",
    "MAX_WAIT_S",
    "RUN_AGENT_SCHEMA",
    "RunAgentArgs",
    "build_mcp_server",
    "mcp_asgi",
    "run_uri",
]
