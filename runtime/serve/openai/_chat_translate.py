"""The daemon's reading of a chat completion: the request decoded and
checked (``decode_request``), the task its conversation becomes
(``build_task``), and the run's usage and ``agentrt`` extension in a reply
(``usage_of``, ``extension_of``).  The wire types themselves:
``agentrt.runtime.wire``.

Pure translation: no HTTP, no run manager.  Part of the daemon
(``agentrt.runtime.serve``); only its OpenAI-compatible endpoints import it.
"""

from __future__ import annotations

import msgspec

from agentrt.protocols._api import RolloutInfo, RunInfo
from agentrt.runtime.serve.openai._openai_error import OpenAIError, decode_error
from agentrt.runtime.wire._chat import ChatCompletionRequest, MessageIn, PromptDetails, UsageOut
from agentrt.runtime.wire._common import Extension, RolloutOut

__all__ = ["build_task", "decode_request", "extension_of", "usage_of"]


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


# -- from messages to a task ------------------------------------------------------

_SYSTEM_ROLES = frozenset({"system", "developer"})


def _text(message: MessageIn, index: int) -> str:
    for name in ("audio", "function_call"):
        if getattr(message, name) is not None:
            raise OpenAIError(
                400,
                f"agentrt does not support `{name}` in messages (text and tool calls only)",
                param=f"messages[{index}].{name}",
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
                param=f"messages[{index}].content[{j}]",
                code="unsupported_parameter",
            )
        texts.append(text)
    return "\n".join(texts)


def _transcript_line(message: MessageIn, index: int, names: dict[str, str]) -> str:
    text = _text(message, index)
    match message.role:
        case "user":
            return f"User: {text}"
        case "assistant":
            calls = [
                f"{c.function.name}({c.function.arguments}) [call {c.id}]"
                if c.id
                else f"{c.function.name}({c.function.arguments})"
                for c in message.tool_calls or []
                if c.function is not None
            ]
            said = f"Assistant: {text}" if text else "Assistant:"
            return f"{said}\n(called {', '.join(calls)})" if calls else said
        case _:  # tool / function results
            call = message.tool_call_id
            name = message.name or (names.get(call) if call else None) or "tool"
            return f"Tool result of {name}{f' [call {call}]' if call else ''}: {text}"


def build_task(messages: list[MessageIn]) -> str:
    """The run's task: a lone user message is the task itself; a longer
    exchange becomes a transcript with roles, to which the agent replies.
    System (and developer) messages come first, as instructions."""
    instructions = [_text(m, i) for i, m in enumerate(messages) if m.role in _SYSTEM_ROLES]
    turns = [(i, m) for i, m in enumerate(messages) if m.role not in _SYSTEM_ROLES]
    if not any(m.role == "user" for _, m in turns):
        raise OpenAIError(400, "at least one user message is required", param="messages")
    if len(turns) == 1:
        index, only = turns[0]
        body = _text(only, index)
        if not body.strip():
            raise OpenAIError(400, "the user message is empty", param=f"messages[{index}].content")
        head = "Task:\n" if instructions else ""
        body = head + body
    else:
        names = {
            c.id: c.function.name
            for _, m in turns
            for c in m.tool_calls or []
            if c.function is not None and c.id
        }
        lines = "\n\n".join(_transcript_line(m, i, names) for i, m in turns)
        body = f"Conversation so far:\n\n{lines}\n\nReply to the user's last message."
    if instructions:
        return "Instructions:\n" + "\n\n".join(instructions) + "\n\n" + body
    return body


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
