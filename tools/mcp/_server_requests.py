"""Answering what an MCP server asks of agentrt, under the server's policy:
``elicitation/create`` (a question for the user: ``config.elicitation``),
``sampling/createMessage`` (a completion from agentrt's models, charged to
the run whose tool call asked: ``config.sampling``) and ``roots/list``.
Owns ``McpClientHooks`` (who is asked: a person, a run's models), the
question a person sees (``ElicitationQuestion``) and the refusals a server
gets.  Knows nothing of sessions or transports: the connection says which
call a request belongs to (``Caller``).  Must not import agents or
aggregators.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, final

import mcp_types as types
from mcp.client.session import ClientRequestContext

from agentrt.protocols._events import McpAuthorizationRequired
from agentrt.protocols._messages import AssistantMessage, ChatMessage, SystemMessage, UserMessage
from agentrt.protocols._model import ModelRequest, SamplingParams
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.kernel._errors import AgentrtError, BudgetExceeded
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._metered import MeteredBackend
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._approval import (
    ElicitationQuestion,
    PersonAsker,
    ask_person,
    request_approval,
)
from agentrt.tools._tool import ElicitationReply
from agentrt.tools.mcp._mcp_config import (
    ElicitationPolicy,
    HttpServerConfig,
    SamplingPolicy,
    StdioServerConfig,
)

__all__ = [
    "REFUSED",
    "Caller",
    "ElicitationQuestion",
    "McpClientHooks",
    "PersonAsker",
    "SamplingTarget",
    "ServerRequestHandler",
    "answer_elicitation",
    "answer_sampling",
    "approve_call",
    "roots_result",
    "schema_defaults",
]

_log = get_logger(__name__)

#: The JSON-RPC error code of a request the client refuses (the spec's
#: example for a rejected sampling request).
REFUSED: Final = -1


@dataclass(frozen=True, slots=True)
class SamplingTarget:
    """Where a run's sampling requests go: its ledger (every call reserved
    and charged there) and the runtime's backends."""

    ledger: BudgetLedger
    backends: Mapping[str, ModelBackend]
    default_model: str | None


@dataclass(frozen=True, slots=True)
class McpClientHooks:
    """Who answers a server's requests: ``ask`` puts a question to the
    person behind a run (``elicitation.mode: ask``, URL elicitations,
    approvals of destructive tools); ``sampling_target`` finds a run's
    ledger and models by run id (``None``: the run is unknown or over)."""

    ask: PersonAsker | None = None
    sampling_target: Callable[[str], SamplingTarget | None] | None = None
    authorize: Callable[[McpAuthorizationRequired], Awaitable[None]] | None = None
    """Shown the URL where a person approves an OAuth server's access
    (``auth.McpAuth``); must return promptly."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The tool call a server request was attributed to."""

    run_id: str = ""
    rollout_id: str = ""
    call_id: str = ""
    tool: str = ""


def _refuse(message: str) -> types.ErrorData:
    return types.ErrorData(code=REFUSED, message=message)


# -- elicitation ------------------------------------------------------------------


def schema_defaults(schema: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer to a form from ``values`` and the schema's defaults; None
    when a required field has neither."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    answer: dict[str, Any] = {}
    for field, spec in properties.items():
        if field in values:
            answer[field] = values[field]
        elif isinstance(spec, Mapping) and "default" in spec:
            answer[field] = spec["default"]
    required = schema.get("required") or []
    if any(field not in answer for field in required):
        return None
    return answer


def _question(server: str, caller: Caller, **fields: Any) -> ElicitationQuestion:
    return ElicitationQuestion(
        id=f"elicit-{uuid.uuid4().hex[:12]}",
        server=server,
        run_id=caller.run_id,
        rollout_id=caller.rollout_id,
        call_id=caller.call_id,
        tool=caller.tool,
        **fields,
    )


async def answer_elicitation(
    server: str,
    policy: ElicitationPolicy,
    hooks: McpClientHooks,
    params: types.ElicitRequestParams,
    caller: Caller,
) -> types.ElicitResult:
    """The answer to one ``elicitation/create``: a decline whenever the
    policy (or the absence of a person) does not allow more."""
    if isinstance(params, types.ElicitRequestURLParams):
        return await _answer_url(server, policy, hooks, params, caller)
    schema = dict(params.requested_schema)
    reply: ElicitationReply | None = None
    if policy.mode == "defaults":
        answer = schema_defaults(schema, policy.values)
        if answer is not None:
            reply = ElicitationReply(action="accept", content=answer)
    elif policy.mode == "ask":
        question = _question(
            server, caller, mode="form", message=params.message, requested_schema=schema
        )
        reply = await ask_person(hooks.ask, question, policy.timeout_s)
    if reply is None:
        _log.info("mcp.elicitation.declined", server=server, mode="form", policy=policy.mode)
        return types.ElicitResult(action="decline")
    action = _action(reply.action)
    if action == "accept":
        return types.ElicitResult(action="accept", content=dict(reply.content or {}))
    return types.ElicitResult(action=action)


async def _answer_url(
    server: str,
    policy: ElicitationPolicy,
    hooks: McpClientHooks,
    params: types.ElicitRequestURLParams,
    caller: Caller,
) -> types.ElicitResult:
    reply: ElicitationReply | None = None
    if policy.url == "ask":
        question = _question(
            server,
            caller,
            mode="url",
            message=params.message,
            url=params.url,
            elicitation_id=params.elicitation_id,
        )
        reply = await ask_person(hooks.ask, question, policy.timeout_s)
    if reply is None:
        _log.info("mcp.elicitation.declined", server=server, mode="url", policy=policy.url)
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action=_action(reply.action))


def _action(text: str) -> Literal["accept", "decline", "cancel"]:
    if text in ("accept", "decline", "cancel"):
        return text  # type: ignore[return-value]
    return "cancel"


async def approve_call(
    server: str,
    hooks: McpClientHooks,
    tool: str,
    arguments: Mapping[str, Any],
    caller: Caller,
    *,
    timeout_s: float,
) -> str | None:
    """Ask the person behind the run whether a destructive tool may run;
    None when approved, else why not."""
    question = _question(
        server,
        caller,
        mode="approval",
        message=f"MCP server {server!r} wants to run the destructive tool {tool!r}; allow it?",
        arguments=dict(arguments),
    )
    where = f"MCP tool {tool!r} (server {server!r}) is marked destructive and needs approval"
    return await request_approval(hooks.ask, question, timeout_s, where=where)


# -- sampling ---------------------------------------------------------------------


def _text(message: types.SamplingMessage) -> str | None:
    blocks = message.content if isinstance(message.content, list) else [message.content]
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, types.TextContent):
            return None
        parts.append(block.text)
    return "\n".join(parts)


def _pick_model(
    policy: SamplingPolicy, target: SamplingTarget, prefs: types.ModelPreferences | None
) -> str | None:
    allowed = list(policy.models) or ([target.default_model] if target.default_model else [])
    hints = [h.name for h in (prefs.hints or []) if h.name] if prefs is not None else []
    for hint in hints:  # the spec: a hint is a substring of a model name
        for model in allowed:
            if hint in model:
                return model
    return allowed[0] if allowed else None


def _backend_for(model: str, backends: Mapping[str, ModelBackend]) -> ModelBackend | None:
    for backend in backends.values():
        if model in backend.models:
            return backend
    only = list(backends.values())
    return only[0] if len(only) == 1 and not only[0].models else None


def _messages(params: types.CreateMessageRequestParams) -> list[ChatMessage] | str:
    messages: list[ChatMessage] = []
    if params.system_prompt:
        messages.append(SystemMessage(content=params.system_prompt))
    for message in params.messages:
        text = _text(message)
        if text is None:
            return "only text content can be sampled"
        if message.role == "user":
            messages.append(UserMessage(content=text))
        else:
            messages.append(AssistantMessage(content=text))
    return messages


_STOP: Final[Mapping[str, str]] = {"stop": "endTurn", "length": "maxTokens"}


def _prepare(
    where: str,
    policy: SamplingPolicy,
    hooks: McpClientHooks,
    params: types.CreateMessageRequestParams,
    caller: Caller,
) -> tuple[SamplingTarget, ModelBackend, ModelRequest] | str:
    """What to send where, or why the request is refused."""
    if policy.mode != "allow" or params.tools:
        return (
            "sampling with tools is not supported"
            if params.tools
            else "is not allowed (sampling.mode: deny)"
        )
    target = (
        hooks.sampling_target(caller.run_id)
        if hooks.sampling_target is not None and caller.run_id
        else None
    )
    if target is None:
        return "no run to charge it to (only a tool call of a run may sample)"
    model = _pick_model(policy, target, params.model_preferences)
    backend = _backend_for(model, target.backends) if model is not None else None
    if model is None or backend is None:
        return (
            f"no backend serves the model {model!r}"
            if model
            else "no model is allowed (sampling.models is empty)"
        )
    messages = _messages(params)
    if isinstance(messages, str):
        return messages
    request = ModelRequest(
        messages=messages,
        model=model,
        sampling=SamplingParams(
            temperature=params.temperature if params.temperature is not None else 0.7,
            max_tokens=min(params.max_tokens, policy.max_tokens),
            stop=list(params.stop_sequences or []),
        ),
    )
    return target, backend, request


async def answer_sampling(
    server: str,
    policy: SamplingPolicy,
    hooks: McpClientHooks,
    params: types.CreateMessageRequestParams,
    caller: Caller,
) -> types.CreateMessageResult | types.ErrorData:
    """Serve one ``sampling/createMessage`` with the run's models, reserved
    on and charged to the run's ledger; an MCP error (code ``REFUSED``) the
    server can read when the policy, the budget or the request forbids."""
    where = f"sampling for MCP server {server!r}"
    prepared = _prepare(where, policy, hooks, params, caller)
    if isinstance(prepared, str):
        _log.info("mcp.sampling.refused", server=server, why=prepared)
        return _refuse(f"{where}: {prepared}")
    target, backend, request = prepared
    try:
        reply = await MeteredBackend(backend, target.ledger, model=request.model).complete(request)
    except BudgetExceeded as exc:
        return _refuse(f"{where}: the run's budget does not allow it ({exc})")
    except AgentrtError as exc:
        return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{where} failed: {exc}")
    choice = reply.choices[0]
    _log.info(
        "mcp.sampling.served",
        server=server,
        run_id=caller.run_id,
        model=reply.model,
        tokens=reply.usage.completion_tokens,
    )
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=choice.message.content or ""),
        model=reply.model,
        stop_reason=_STOP.get(choice.finish_reason, choice.finish_reason),
    )


# -- roots ------------------------------------------------------------------------


def roots_result(paths: Sequence[Path]) -> types.ListRootsResult:
    """``roots/list``'s answer: each folder once, as a ``file://`` URI."""
    seen: dict[str, types.Root] = {}
    for path in paths:
        resolved = path.expanduser().resolve()
        uri = resolved.as_uri()
        seen.setdefault(uri, types.Root(uri=uri, name=resolved.name or str(resolved)))
    return types.ListRootsResult(roots=list(seen.values()))


# -- one connection's answers -------------------------------------------------------

#: Where a server names the task a request belongs to (2025-11-25).
_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"


@final
class ServerRequestHandler:
    """One connection's answers to its server's requests (the SDK session's
    sampling, elicitation and roots callbacks).

    A server request does not say which tool call it serves (unless it
    names a task), so it is attributed to the calls in flight: the only
    one, or any of them when they all belong to one run; when calls of
    several runs are in flight, sampling is refused (no run to charge) and
    a question goes out without a run.  Roots are ``config.roots`` plus
    the folders each owner registered with ``set_roots`` (on a rollout's own
    connection, ``rollouts``: its workspace and what it added)."""

    def __init__(
        self, config: StdioServerConfig | HttpServerConfig, hooks: McpClientHooks | None
    ) -> None:
        self._config = config
        self.hooks = hooks or McpClientHooks()
        self._calls: dict[int, Caller] = {}
        self._ids = itertools.count()
        self._tasks: dict[str, Caller] = {}
        self._workspaces: dict[str, tuple[Path, ...]] = {}
        self.on_roots_changed: Callable[[], Awaitable[None]] | None = None
        """Sends ``notifications/roots/list_changed`` on the open session."""

    @contextlib.contextmanager
    def calling(self, caller: Caller) -> Iterator[None]:
        """A tool call in flight, while the block runs."""
        key = next(self._ids)
        self._calls[key] = caller
        try:
            yield
        finally:
            del self._calls[key]

    def task_started(self, task_id: str, caller: Caller) -> None:
        self._tasks[task_id] = caller

    def task_ended(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)

    def caller_of(self, context: ClientRequestContext) -> Caller | None:
        """The call a server request belongs to, when it can be told."""
        related = (context.meta or {}).get(_RELATED_TASK)
        if isinstance(related, Mapping) and (task := related.get("taskId")) in self._tasks:
            return self._tasks[str(task)]
        calls = [*self._calls.values(), *self._tasks.values()]
        if calls and len({c.run_id for c in calls}) == 1:
            return calls[0]
        return None

    async def sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        caller = self.caller_of(context)
        if caller is None and self._config.sampling.mode == "allow":
            return _refuse(
                f"sampling for MCP server {self._config.name!r}: cannot tell which run's tool "
                "call asked (none, or calls of several runs, are in flight)"
            )
        return await answer_sampling(
            self._config.name, self._config.sampling, self.hooks, params, caller or Caller()
        )

    async def elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return await answer_elicitation(
            self._config.name,
            self._config.elicitation,
            self.hooks,
            params,
            self.caller_of(context) or Caller(),
        )

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return roots_result(self.roots())

    def roots(self) -> list[Path]:
        """The folders offered now: configured first, then each owner's."""
        return [*self._config.roots, *(p for ps in self._workspaces.values() for p in ps)]

    async def set_roots(self, owner: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` for ``owner`` (replacing what it offered; empty:
        withdraw them); the server hears ``roots/list_changed`` when the
        list changes."""
        before = self.roots()
        if paths:
            self._workspaces[owner] = tuple(paths)
        else:
            self._workspaces.pop(owner, None)
        if self.roots() != before and self.on_roots_changed is not None:
            await self.on_roots_changed()
