"""The daemon's reading of a chat completion: the request decoded and
checked (``decode_request``), what its conversation asks of the run
(``chat_asked``: native messages, instructions, the task), and the run's
usage and ``agentrt`` extension in a reply (``usage_of``, ``extension_of``).
The wire types themselves: ``agentrt.runtime.wire``.

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only its OpenAI-compatible endpoints import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from agentrt.protocols._api import RolloutInfo, RunInfo
from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ImagePart,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._model import TokenLogprob
from agentrt.protocols._run import conversation_problem
from agentrt.runtime.serve.openai._openai_error import OpenAIError, decode_error
from agentrt.runtime.wire._chat import ChatCompletionRequest, MessageIn, PromptDetails, UsageOut
from agentrt.runtime.wire._common import Extension, RolloutOut

__all__ = [
    "Asked",
    "Tagged",
    "asked_of",
    "chat_asked",
    "decode_request",
    "extension_of",
    "logprob_entries",
    "usage_of",
]


def decode_request(body: bytes) -> ChatCompletionRequest:
    try:
        request = msgspec.json.decode(body, type=ChatCompletionRequest)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    if not request.messages:
        raise OpenAIError(400, "at least one message is required", param="messages")
    if request.n not in (None, 1):
        raise OpenAIError(
            400,
            f"n={request.n}: an agentrt run returns one answer; ask for several "
            "rollouts with `rollouts` (they are aggregated into that answer)",
            param="n",
        )
    return request


# -- from messages to native messages ------------------------------------------

_SYSTEM_ROLES = frozenset({"system", "developer"})

Tagged = tuple[str, MessageIn]
"""A message and the request field it came from (``messages[3]``, ``input[2]``)."""


@dataclass(frozen=True, slots=True)
class Asked:
    """What a client's conversation asks of a run: its last user message
    (the task), its system messages (``instructions``) and, when it is more
    than one user message, the conversation as native messages."""

    task: str
    instructions: str | None = None
    conversation: list[ChatMessage] = field(default_factory=list)


def _text(message: MessageIn, param: str) -> str:
    for name in ("audio", "function_call"):
        if getattr(message, name) is not None:
            raise OpenAIError(
                400,
                f"agentrt does not support `{name}` in messages (text and tool calls only)",
                param=f"{param}.{name}",
                code="unsupported_parameter",
            )
    content = message.content
    if content is None:
        return message.refusal or ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for j, part in enumerate(content):
        text = (
            part.text if part.type == "text" else part.refusal if part.type == "refusal" else None
        )
        if text is None:
            raise OpenAIError(
                400,
                f"only text content parts are supported, got {part.type!r}",
                param=f"{param}.content[{j}]",
                code="unsupported_parameter",
            )
        texts.append(text)
    return "\n".join(texts)


def _native(message: MessageIn, param: str) -> ChatMessage:
    text = _text(message, param)
    match message.role:
        case "user":
            return UserMessage(content=text, name=message.name)
        case "assistant":
            calls: list[ToolCall] = []
            for j, call in enumerate(message.tool_calls or []):
                if not call.id or call.function is None or not call.function.name:
                    raise OpenAIError(
                        400,
                        "a tool call needs its `id` and `function.name`",
                        param=f"{param}.tool_calls[{j}]",
                    )
                calls.append(
                    ToolCall(
                        id=call.id,
                        function=FunctionCall(
                            name=call.function.name, arguments=call.function.arguments or "{}"
                        ),
                    )
                )
            return AssistantMessage(content=text or None, tool_calls=calls, name=message.name)
        case "tool":
            if not message.tool_call_id:
                raise OpenAIError(
                    400,
                    "a tool message needs the `tool_call_id` of the call it answers",
                    param=f"{param}.tool_call_id",
                )
            return ToolMessage(content=text, tool_call_id=message.tool_call_id, name=message.name)
        case _:
            raise OpenAIError(
                400,
                f"messages of role {message.role!r} are not supported; use `tool` messages "
                "for tool results",
                param=f"{param}.role",
                code="unsupported_parameter",
            )


def asked_of(
    messages: list[Tagged],
    where: str,
    call_id_field: str = "tool_call_id",
    before: Sequence[ChatMessage] = (),
) -> Asked:
    """The run ``messages`` ask for, after the turns ``before`` them (a
    previous response's): system (and developer) messages become its
    instructions; the rest reach the agent's model as they are (user,
    assistant with its tool calls, tool results, in order), its last user
    message being the task.  A tool result for a call the assistant message
    before it did not make is a 400 naming it (``where``: the field of the
    whole conversation, for problems of no one message; ``call_id_field``:
    what the request calls a result's call id)."""
    instructions = [_text(m, p) for p, m in messages if m.role in _SYSTEM_ROLES]
    turns = [(p, _native(m, p)) for p, m in messages if m.role not in _SYSTEM_ROLES]
    native = [*before, *(m for _, m in turns)]
    params = [where] * len(before) + [p for p, _ in turns]
    users = [i for i, m in enumerate(native) if isinstance(m, UserMessage)]
    if not users:
        raise OpenAIError(400, "at least one user message is required", param=where)
    last = native[users[-1]]
    assert isinstance(last, UserMessage)
    task = last.content if isinstance(last.content, str) else _parts_text(last.content)
    if not task.strip():
        raise OpenAIError(
            400, "the last user message is empty", param=f"{params[users[-1]]}.content"
        )
    problem = conversation_problem(native)
    if problem is not None:
        index, name, reason = problem
        name = call_id_field if name == "tool_call_id" else name
        raise OpenAIError(400, reason, param=f"{params[index]}.{name}")
    return Asked(
        task=task,
        instructions="\n\n".join(instructions) if instructions else None,
        conversation=[] if len(native) == 1 else native,
    )


def _parts_text(parts: list[TextPart | ImagePart]) -> str:
    return "\n".join(p.text for p in parts if isinstance(p, TextPart))


def chat_asked(messages: list[MessageIn]) -> Asked:
    """What a chat completion's ``messages`` ask (``asked_of``)."""
    return asked_of([(f"messages[{i}]", m) for i, m in enumerate(messages)], "messages")


_Entry = TypeVar("_Entry")


def logprob_entries(
    logprobs: Sequence[TokenLogprob],
    entry: Callable[..., _Entry],
    alternative: Callable[..., object],
) -> list[_Entry]:
    """``logprobs`` as an endpoint's entries: each token an ``entry`` with its
    UTF-8 bytes and its ``top_logprobs``, each an ``alternative``."""
    return [
        entry(
            token=t.token,
            logprob=t.logprob,
            bytes=list(t.token.encode()),
            top_logprobs=[
                alternative(token=a.token, logprob=a.logprob, bytes=list(a.token.encode()))
                for a in t.top
            ],
        )
        for t in logprobs
    ]


def usage_of(info: RunInfo) -> UsageOut:
    usage = info.cost.usage
    return UsageOut(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=PromptDetails(cached_tokens=usage.cached_prompt_tokens),
    )


def extension_of(info: RunInfo, rollouts: list[RolloutInfo]) -> Extension:
    return Extension(
        run_id=info.run_id,
        status=info.status,
        agent=info.agent,
        rollouts=info.rollouts,
        aggregate=info.aggregate,
        cost_usd=info.cost.usd,
        model_calls=info.cost.model_calls,
        rollout_details=[
            RolloutOut(rollout_id=r.rollout_id, status=r.status, steps=r.steps, answer=r.answer)
            for r in rollouts
        ],
    )
