"""What the OpenAI request fields both endpoints share become: ``RunOptions``
(sampling, logprobs, client tools, tool choice, the answer's JSON schema)
and the scaling of the run (``rollouts``... top level or in an ``agentrt``
object), each field honoured or refused with a 400 naming it.

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only the OpenAI-compatible endpoints import it.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Protocol

import msgspec

from agentrt.protocols._run import Budget, RequiredTool, RunOptions, ScalingSpec, ToolChoice
from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.serve.openai._openai_error import OpenAIError, decode_error
from agentrt.runtime.wire._chat import ChatCompletionRequest, NamedToolChoice, ToolIn
from agentrt.runtime.wire._common import ScalingIn


class Scaling(Protocol):
    """agentrt's own fields of a request (top level, i.e. ``extra_body``, or
    in its ``agentrt`` object)."""

    @property
    def rollouts(self) -> int | None: ...
    @property
    def aggregate(self) -> str | None: ...
    @property
    def aggregate_options(self) -> dict[str, Any] | None: ...
    @property
    def budget(self) -> dict[str, Any] | None: ...
    @property
    def agentrt(self) -> ScalingIn | None: ...
    @property
    def parallel_tool_calls(self) -> bool | None: ...


class Defaults(Protocol):
    """The daemon's scaling for a request that does not set its own (the
    ``[runtime]`` section of its config)."""

    @property
    def rollouts(self) -> int: ...
    @property
    def aggregate(self) -> str: ...
    @property
    def aggregate_options(self) -> dict[str, Any]: ...


class Sampling(msgspec.Struct, kw_only=True):
    """The sampling fields, as either endpoint names them."""

    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    stop: list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None


class ClientTool(msgspec.Struct, frozen=True, kw_only=True):
    """A client tool, whichever endpoint declared it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None


class Requested(msgspec.Struct, frozen=True, kw_only=True):
    """What a request asks of the run beside its task."""

    options: RunOptions
    scaling: ScalingSpec
    budget: Budget
    fields: dict[str, str]
    """Where each run field came from (to name the request's field when the
    manager refuses one)."""
    client_tools: frozenset[str] = frozenset()
    parallel_tool_calls: bool = True


def refuse(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="unsupported_parameter")


def refuse_set(param: str, value: object, neutral: tuple[object, ...] = (None,)) -> None:
    """A 400 naming ``param`` when the request gave it a value agentrt cannot
    honour (one not in ``neutral``; ``None`` and ``{}`` mean left out)."""
    if value not in neutral:
        shown = ", ".join(repr(n) for n in neutral if n is not None and n != {})
        allowed = f" (only {shown} is accepted)" if shown else ""
        raise refuse(param, f"agentrt does not support `{param}`{allowed}; leave it out")


_ACCEPTED: Final[dict[str, tuple[object, ...]]] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "service_tier": (None, "auto", "default"),
    "store": (None, True),
    "background": (None, False),
}
"""The values agentrt accepts of a field it cannot honour, where it accepts
more than leaving the field out."""


def refuse_unsupported(request: object, fields: str) -> None:
    """``refuse_set`` for each of ``fields`` of ``request`` (their names,
    space-separated), in that order."""
    for param in fields.split():
        refuse_set(param, getattr(request, param), _ACCEPTED.get(param, (None,)))


def refuse_stream_options(stream_options: object, stream: bool | None) -> None:
    if stream_options is not None and not stream:
        raise OpenAIError(400, "stream_options needs `stream: true`", param="stream_options")


def client_tool(index: int, kind: str, tool: ClientTool | None) -> ClientTool:
    """A request's ``tools[index]``: ``tool`` when it declares a function."""
    if kind != "function" or tool is None:
        raise refuse(f"tools[{index}].type", f"only function tools are supported, got {kind!r}")
    return tool


def _option(scaling: Scaling, key: str) -> tuple[Any, str]:
    """A scaling option and where it came from (top level or ``agentrt``)."""
    top = getattr(scaling, key)
    nested = getattr(scaling.agentrt, key) if scaling.agentrt is not None else None
    if top is not None and nested is not None and top != nested:
        raise OpenAIError(
            400,
            f"{key} is given twice with different values ({top!r} at the top level, "
            f"{nested!r} in `agentrt`); give it once",
            param=f"agentrt.{key}",
        )
    if nested is not None:
        return nested, f"agentrt.{key}"
    return top, key


def _budget(raw: dict[str, Any] | None, where: str) -> Budget:
    if raw is None:
        return Budget()
    try:
        return msgspec.convert(raw, Budget)
    except msgspec.ValidationError as exc:
        raise decode_error(exc, prefix=where) from None


def response_schema(kind: str, schema: dict[str, Any] | None, param: str) -> dict[str, Any] | None:
    """The JSON schema a ``response_format``/``text.format`` asks the answer to match."""
    match kind:
        case "text":
            return None
        case "json_object":
            return {"type": "object"}
        case "json_schema":
            if schema is None:
                raise OpenAIError(400, "a json_schema format needs its `schema`", param=param)
            return schema
        case _:
            raise refuse(param, f"unknown response format type {kind!r}")


def requested(
    scaling_in: Scaling,
    sampling: Sampling,
    tools: list[ClientTool],
    tool_choice: ToolChoice,
    *,
    schema: dict[str, Any] | None,
    defaults: Defaults,
) -> Requested:
    """The run's options and scaling.  Client tools and logprobs need one
    rollout (a 400 naming ``rollouts`` otherwise); a request with client
    tools that does not say how many rollouts runs one."""
    rollouts, rollouts_at = _option(scaling_in, "rollouts")
    aggregate, aggregate_at = _option(scaling_in, "aggregate")
    options, options_at = _option(scaling_in, "aggregate_options")
    budget_raw, budget_at = _option(scaling_in, "budget")
    one_answer = "client tools" if tools else "logprobs" if sampling.logprobs else None
    if one_answer is not None:
        if rollouts is not None and rollouts != 1:
            raise OpenAIError(
                400,
                f"{one_answer} need one rollout: the answer is one model reply, not an "
                f"aggregate of {rollouts} rollouts; leave `rollouts` out or set it to 1",
                param=rollouts_at,
                code="unsupported_parameter",
            )
        rollouts = 1
    if aggregate is None:
        aggregate = defaults.aggregate
        options = dict(defaults.aggregate_options) if options is None else options
    names = [t.name for t in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise OpenAIError(400, f"two tools are named {name!r}", param=f"tools[{index}].name")
    specs = [
        ToolSpec(
            name=t.name,
            description=t.description,
            parameters=t.parameters or {"type": "object", "properties": {}},
        )
        for t in tools
    ]
    # Sampling's fields are RunOptions' own.
    sampled = msgspec.structs.asdict(sampling) | {"top_logprobs": sampling.top_logprobs or 0}
    run_options = RunOptions(
        **sampled, response_schema=schema, client_tools=specs, tool_choice=tool_choice
    )
    return Requested(
        options=run_options,
        scaling=ScalingSpec(
            rollouts=defaults.rollouts if rollouts is None else rollouts,
            aggregate=aggregate,
            options=options or {},
        ),
        budget=_budget(budget_raw, budget_at),
        fields={
            "scaling.rollouts": rollouts_at,
            "scaling.aggregate": aggregate_at,
            "scaling.options": options_at,
            "budget": budget_at,
        },
        client_tools=frozenset(names),
        parallel_tool_calls=scaling_in.parallel_tool_calls is not False,
    )


def named_choice(kind: str, name: str | None, shape: str) -> str:
    """The function a named ``tool_choice`` names (``shape``: how one is written)."""
    if kind != "function" or name is None:
        raise refuse(
            "tool_choice.type",
            f"a named tool choice names a function ({shape}), got type {kind!r}",
        )
    return name


def tool_choice_of(
    choice: object, named: str | None, tools: list[ClientTool], param: str
) -> ToolChoice:
    """A request's ``tool_choice`` (a mode, or ``named``: the function a
    named choice names, at ``param``) as the run takes it; one that leaves
    no client tool to call is a 400 naming it."""
    names = [t.name for t in tools]
    if named is not None:
        if named not in names:
            known = ", ".join(repr(n) for n in names) or "no tools"
            raise OpenAIError(
                400,
                f"tool_choice names {named!r}, which is not one of the request's tools ({known})",
                param=param,
            )
        return RequiredTool(name=named)
    if choice == "required" and not tools:
        raise OpenAIError(400, "tool_choice 'required' needs `tools`", param="tool_choice")
    if choice in (None, "auto"):
        return "auto"
    if choice == "none":
        return "none"
    return "required"


_CHAT_UNSUPPORTED: Final = (
    "frequency_penalty presence_penalty logit_bias reasoning_effort verbosity audio prediction "
    "web_search_options functions function_call service_tier store prompt_cache_retention"
)


def _chat_tool(tool: ToolIn) -> ClientTool | None:
    """The function a chat tool declares, if that is all it declares."""
    if tool.function is None or tool.custom is not None:
        return None
    return ClientTool(
        name=tool.function.name,
        description=tool.function.description,
        parameters=tool.function.parameters,
    )


def chat_requested(chat: ChatCompletionRequest, defaults: Defaults) -> Requested:
    """What a chat completion asks of its run; fields agentrt cannot honour
    with the value given are refused (a 400 naming the field)."""
    refuse_unsupported(chat, _CHAT_UNSUPPORTED)
    if chat.modalities is not None and chat.modalities != ["text"]:
        raise refuse("modalities", "agentrt answers in text only; use ['text'] or leave it out")
    refuse_stream_options(chat.stream_options, chat.stream)
    if (
        chat.max_tokens is not None
        and chat.max_completion_tokens is not None
        and chat.max_tokens != chat.max_completion_tokens
    ):
        raise OpenAIError(
            400,
            "max_tokens and max_completion_tokens differ; give one",
            param="max_completion_tokens",
        )
    if chat.top_logprobs and not chat.logprobs:
        raise OpenAIError(400, "top_logprobs needs `logprobs: true`", param="top_logprobs")
    tools = [client_tool(i, t.type, _chat_tool(t)) for i, t in enumerate(chat.tools or [])]
    choice = chat.tool_choice
    named = None
    if isinstance(choice, NamedToolChoice):
        function = choice.function.name if choice.function is not None else None
        named = named_choice(
            choice.type, function, "{'type': 'function', 'function': {'name': ...}}"
        )
    tool_choice = tool_choice_of(choice, named, tools, "tool_choice.function.name")
    schema = None
    if chat.response_format is not None:
        fmt = chat.response_format
        inner = fmt.json_schema
        if fmt.type == "json_schema" and inner is None:
            raise OpenAIError(
                400, "a json_schema format needs `json_schema`", param="response_format"
            )
        schema = response_schema(
            fmt.type,
            inner.schema if inner is not None else None,
            "response_format.json_schema.schema",
        )
    stop = [chat.stop] if isinstance(chat.stop, str) else chat.stop
    sampling = Sampling(
        temperature=chat.temperature,
        top_p=chat.top_p,
        max_tokens=chat.max_completion_tokens or chat.max_tokens,
        stop=stop,
        seed=chat.seed,
        logprobs=bool(chat.logprobs),
        top_logprobs=chat.top_logprobs,
    )
    return requested(chat, sampling, tools, tool_choice, schema=schema, defaults=defaults)


class Labelled(Protocol):
    """The labels a request gives its run."""

    metadata: dict[str, str] | None
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None


def labels(request: Labelled, interface: str) -> dict[str, str]:
    """The run's metadata: the request's, what endpoint it came through, and
    the labels the request gives (``user``, ``safety_identifier``...)."""
    out = {"interface": interface, **(request.metadata or {})}
    named = {
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
    }
    out.update({k: v for k, v in named.items() if v})
    return out


def param_for(where: str | None, fields: dict[str, str]) -> str | None:
    """The request field a manager's ``where`` (``scaling.rollouts``) names."""
    if where is None:
        return None
    for prefix, field in sorted(fields.items(), key=lambda kv: -len(kv[0])):
        if where == prefix or where.startswith(prefix + "."):
            return field + where[len(prefix) :]
    return where


__all__ = [
    "ClientTool",
    "Defaults",
    "Labelled",
    "Requested",
    "Sampling",
    "Scaling",
    "chat_requested",
    "client_tool",
    "labels",
    "named_choice",
    "param_for",
    "refuse",
    "refuse_set",
    "refuse_stream_options",
    "refuse_unsupported",
    "requested",
    "response_schema",
    "tool_choice_of",
]
