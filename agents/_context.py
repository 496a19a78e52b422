"""Context management: ``ContextWindow``, the prompt of each step of a
rollout, kept within a token budget.

Token counts are estimates; servers report the real ones.  Pure
computation: no I/O.  Must not import tools' implementations, aggregators
or the roof.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Final, final

import msgspec

from agentrt.agents._agent_config import AgentConfig, ContextConfig
from agentrt.protocols._messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agentrt.protocols._tools import ToolResult, ToolSpec

# The estimates live on the runtime floor (``MeteredBackend`` reserves on
# them too); re-exported here, where the agent loop has always found them.
from agentrt.runtime.models._prompt_estimate import (
    MESSAGE_OVERHEAD,
    CharEstimator,
    TokenEstimator,
    char_estimator,
    estimate_request_tokens,
    message_tokens,
    tools_tokens,
)

NOTES_HEADER: Final = (
    "Notes on earlier steps (folded to keep the context short; arguments and results are abridged):"
)


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping head and tail."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} characters omitted ...] "
    keep = max(limit - len(marker), 2)
    return text[: keep - keep // 3] + marker + text[len(text) - keep // 3 :]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 1)] + "..."


NoteWriter = Callable[[int, AssistantMessage, Sequence[ToolResult], int], list[str]]
"""``(step, assistant message, its results, chars per item) -> note lines``."""


def brief_notes(
    step: int, message: AssistantMessage, results: Sequence[ToolResult], chars: int
) -> list[str]:
    """One line for the assistant's remark and one per tool call."""
    lines = []
    if message.content and message.content.strip():
        lines.append(f"- step {step}: noted: {_one_line(message.content, chars)}")
    by_id = {r.call_id: r for r in results}
    for call in message.tool_calls:
        args = _one_line(call.function.arguments, chars)
        result = by_id.get(call.id)
        if result is None:
            outcome = "no result"
        else:
            state = "error" if result.is_error else "ok"
            outcome = f"{state}: {_one_line(result.content, chars)}"
        lines.append(f"- step {step}: {call.function.name}({args}) -> {outcome}")
    return lines


class _Turn(msgspec.Struct, gc=False):
    # gc=False: a rollout keeps one per step, and a turn refers to nothing
    # that refers back to it.
    step: int
    assistant: AssistantMessage
    results: tuple[ToolResult, ...]
    messages: tuple[ChatMessage, ...] = ()
    tokens: int = 0
    feedback: str | None = None
    """A user message after the tool results (an answer sent back)."""


@final
class ContextWindow:
    """The prompt of every step of one rollout.

    Messages are ``system | task | seed | [notes] | turns...`` (a turn: an
    assistant message and the tool messages answering it; the task: one
    user message, or a client's ``conversation`` as its native messages),
    tool definitions beside them sorted by name.  The system and task messages and the tools
    are the same bytes on every step and in every rollout of the same agent
    and task, and the history is append-only between compactions, so a
    server's prefix cache serves them.  Tool results over
    ``max_tool_result_tokens`` are clipped (head and tail) in the prompt.
    Token counts are estimates (characters / ``chars_per_token`` plus a
    per-message overhead)."""

    def __init__(
        self,
        config: ContextConfig,
        *,
        instructions: str,
        task: str,
        tools: Sequence[ToolSpec] = (),
        seed: Sequence[ChatMessage] = (),
        conversation: Sequence[ChatMessage] = (),
        estimator: TokenEstimator | None = None,
        note_writer: NoteWriter = brief_notes,
    ) -> None:
        self.config = config
        self.estimate_text: TokenEstimator = estimator or char_estimator(config.chars_per_token)
        self._write_notes = note_writer
        # A list sorted already (an agent's own tools) is shared, not copied:
        # nothing changes it, and every rollout's requests then name the
        # same list.
        self.tools: list[ToolSpec] = (
            tools
            if isinstance(tools, list) and _sorted_by_name(tools)
            else sorted(tools, key=lambda t: t.name)
        )
        # A tuple of frozen messages: the collector stops tracking it.
        asked: tuple[ChatMessage, ...] = (
            tuple(conversation) if conversation else (UserMessage(content=task),)
        )
        self._prefix_len = 1 + len(asked)
        self._head: tuple[ChatMessage, ...] = (
            SystemMessage(content=instructions),
            *asked,
            *seed,
        )
        self._head_tokens = estimate_request_tokens(self._head, self.tools, self.estimate_text)
        self._notes: list[str] = []
        self._omitted_notes = 0
        self._notes_tokens = 0
        self._turns: list[_Turn] = []
        self._messages: list[ChatMessage] = list(self._head)
        self._tokens = self._head_tokens
        self.compactions = 0
        self.pruned_calls = 0
        self.folded_turns = 0

    # -- reading -------------------------------------------------------------

    def estimate(self) -> int:
        """Estimated prompt tokens of the current messages plus tools."""
        return self._tokens

    @property
    def prefix(self) -> list[ChatMessage]:
        """The instructions and the task (or conversation): what every
        request starts with."""
        return list(self._head[: self._prefix_len])

    @property
    def head_tokens(self) -> int:
        """Estimated tokens that no compaction can remove (prefix, seed, tools)."""
        return self._head_tokens

    def messages(self) -> list[ChatMessage]:
        """The next request's messages, compacted first if over budget.
        The caller checks ``estimate()`` against the budget afterwards: a
        head alone over budget cannot be helped here."""
        if self._tokens > self.config.budget_tokens:
            self.compact()
        return list(self._messages)

    # -- writing -------------------------------------------------------------

    def add_turn(
        self, step: int, assistant: AssistantMessage, results: Sequence[ToolResult]
    ) -> None:
        """Append a step's assistant message and its tool results (in call
        order).  A tuple of results is kept as it is (the loop's step record
        holds the same tuple)."""
        kept = results if isinstance(results, tuple) else tuple(results)
        turn = _Turn(step=step, assistant=assistant, results=kept)
        self._render(turn)
        self._turns.append(turn)
        self._messages.extend(turn.messages)
        self._tokens += turn.tokens

    def add_feedback(self, text: str) -> None:
        """Answer the last turn with a user message (a final answer that did
        not match its schema, sent back with the reason)."""
        turn = self._turns[-1]
        turn.feedback = text
        message = UserMessage(content=text)
        tokens = message_tokens(message, self.estimate_text)
        turn.messages = (*turn.messages, message)
        turn.tokens += tokens
        self._messages.append(message)
        self._tokens += tokens

    def _render(self, turn: _Turn) -> None:
        limit = int(self.config.max_tool_result_tokens * self.config.chars_per_token)
        by_id: dict[str, ToolResult] = {}
        for r in turn.results:  # a loop: no comprehension frame per step
            by_id[r.call_id] = r
        messages: list[ChatMessage] = [turn.assistant]
        for call in turn.assistant.tool_calls:
            result = by_id.get(call.id)
            if result is not None:
                content = result.content
                messages.append(
                    ToolMessage(
                        content=content if len(content) <= limit else clip(content, limit),
                        tool_call_id=call.id,
                        name=result.name,
                    )
                )
        if turn.feedback is not None:
            messages.append(UserMessage(content=turn.feedback))
        turn.messages = tuple(messages)
        tokens = 0
        for message in messages:  # a loop, not sum(): no generator resumed per message
            tokens += message_tokens(message, self.estimate_text)
        turn.tokens = tokens

    # -- compaction ----------------------------------------------------------

    def compact(self) -> None:
        """Shrink the history to ``compact_to`` of the budget, in this order:
        prune failed tool calls a later call of the same tool corrected; fold
        the oldest answered turns outside ``keep_recent_turns`` into one-line
        notes (one notes message after the task); drop the oldest note lines
        (their count is kept); fold recent turns too, down to the last one."""
        target = int(self.config.budget_tokens * self.config.compact_to)
        self.compactions += 1
        self._prune_corrected()
        keep = self.config.keep_recent_turns
        self._fold_until(target, keep)
        while self._recount() > target and self._drop_oldest_note():
            pass
        if self._recount() > target:
            self._fold_until(target, 1)
        self._rebuild()

    def _prune_corrected(self) -> None:
        succeeded_later: set[str] = set()
        kept: list[_Turn] = []
        for turn in reversed(self._turns):
            corrected = {
                r.call_id for r in turn.results if r.is_error and r.name in succeeded_later
            }
            succeeded_later.update(r.name for r in turn.results if not r.is_error)
            if corrected:
                calls = [c for c in turn.assistant.tool_calls if c.id not in corrected]
                self.pruned_calls += len(corrected)
                if not calls:
                    continue
                turn.assistant = AssistantMessage(
                    content=turn.assistant.content,
                    tool_calls=calls,
                    reasoning_content=turn.assistant.reasoning_content,
                    name=turn.assistant.name,
                )
                turn.results = tuple([r for r in turn.results if r.call_id not in corrected])
                self._render(turn)
            kept.append(turn)
        kept.reverse()
        self._turns = kept

    def _fold_until(self, target: int, keep: int) -> None:
        while len(self._turns) > keep and self._recount() > target:
            turn = self._turns.pop(0)
            self._notes.extend(
                self._write_notes(turn.step, turn.assistant, turn.results, self.config.note_chars)
            )
            self.folded_turns += 1

    def _drop_oldest_note(self) -> bool:
        if not self._notes:
            return False
        self._notes.pop(0)
        self._omitted_notes += 1
        return True

    def _notes_message(self) -> UserMessage | None:
        if not self._notes and not self._omitted_notes:
            return None
        lines = [NOTES_HEADER]
        if self._omitted_notes:
            lines.append(f"- ({self._omitted_notes} earlier notes omitted)")
        lines.extend(self._notes)
        return UserMessage(content="\n".join(lines))

    def _recount(self) -> int:
        notes = self._notes_message()
        self._notes_tokens = 0 if notes is None else message_tokens(notes, self.estimate_text)
        return self._head_tokens + self._notes_tokens + sum(t.tokens for t in self._turns)

    def _rebuild(self) -> None:
        self._tokens = self._recount()
        notes = self._notes_message()
        messages = list(self._head)
        if notes is not None:
            messages.append(notes)
        for turn in self._turns:
            messages.extend(turn.messages)
        self._messages = messages


def _sorted_by_name(tools: list[ToolSpec]) -> bool:
    return all(a.name <= b.name for a, b in itertools.pairwise(tools))


def fit_context(
    config: AgentConfig, *, chars_per_token: float | None, window_tokens: int | None
) -> AgentConfig:
    """``config`` with its context budget fitted to the model that serves it,
    in the keys its author left unset: ``chars_per_token`` measured with the
    backend's own tokenizer (``calibrate_chars_per_token``; ``None``: keep
    the generous default), and ``budget_tokens`` within the model's context
    window (``window_tokens``) less a step's completion tokens, so the
    history is folded before the model would refuse the prompt."""
    given = config.context.model_fields_set
    changes: dict[str, float | int] = {}
    if chars_per_token is not None and "chars_per_token" not in given:
        changes["chars_per_token"] = chars_per_token
    if window_tokens is not None and "budget_tokens" not in given:
        room = window_tokens - config.limits.max_tokens_per_step
        if 64 <= room < config.context.budget_tokens:
            changes["budget_tokens"] = room
    if not changes:
        return config
    return config.model_copy(update={"context": config.context.model_copy(update=changes)})


__all__ = [
    "MESSAGE_OVERHEAD",
    "NOTES_HEADER",
    "CharEstimator",
    "ContextWindow",
    "NoteWriter",
    "TokenEstimator",
    "brief_notes",
    "clip",
    "estimate_request_tokens",
    "fit_context",
    "message_tokens",
    "tools_tokens",
]
