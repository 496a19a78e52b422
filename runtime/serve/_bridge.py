"""The daemon's two event loops and the bridge between them: ``RunService``
(what every interface needs from the manager) and ``ManagerBridge`` (whose
answers from the run loop go on through ``Turns``).  The HTTP server runs on its own thread and loop
so that its requests do not wait behind the run loop's bursts (measured: a
300+ ms p99 for ``GET /v1/runs/{id}`` with 200 runs executing).

The roof: may import every layer.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar, final

from agentrt.protocols._api import (
    AgentInfo,
    ElicitationAnswer,
    RolloutInfo,
    RunDetail,
    RunInfo,
    RunPage,
    ThreadInfo,
)
from agentrt.protocols._events import ElicitationRequested, Event, McpAuthorizationRequired
from agentrt.protocols._messages import ChatMessage
from agentrt.protocols._model import ModelReply
from agentrt.protocols._run import RunRequest, RunStatus
from agentrt.protocols._trajectory import Trajectory, TrajectorySummary
from agentrt.protocols._webhooks import WebhookDelivery
from agentrt.runtime.config._daemon_config import DaemonConfig
from agentrt.runtime.models._backend_health import BackendHealth
from agentrt.runtime.serve._run_manager import EventBatch, RunManager, follow_batches
from agentrt.runtime.serve._turns import Turns
from agentrt.runtime.serve.store._run_store import ANY_OWNER, Owner

T = TypeVar("T")


class RunService(Protocol):
    """What the daemon's interfaces use: ``RunManager`` itself (one loop,
    e.g. ``agentrt mcp``) or a ``ManagerBridge`` (the daemon's API thread)."""

    @property
    def config(self) -> DaemonConfig: ...

    @property
    def accepting(self) -> bool: ...

    @property
    def usd_caps(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def agents(self) -> builtins.list[AgentInfo]: ...

    def active(self) -> int: ...

    async def backend_health(self) -> dict[str, BackendHealth]: ...

    async def mcp_authorizations(self) -> builtins.list[McpAuthorizationRequired]: ...

    async def submit(
        self, request: RunRequest, *, run_id: str | None = None, owner: str | None = None
    ) -> RunInfo: ...

    async def get(self, run_id: str) -> RunInfo | None: ...

    async def create_thread(
        self, metadata: dict[str, str], *, owner: str | None = None
    ) -> ThreadInfo: ...

    async def thread(self, thread_id: str) -> ThreadInfo | None: ...

    async def list_threads(
        self, *, limit: int = 50, owner: Owner = ANY_OWNER
    ) -> builtins.list[ThreadInfo]: ...

    async def delete_thread(self, thread_id: str) -> bool: ...

    async def submit_in_thread(
        self, thread_id: str, request: RunRequest, *, owner: str | None = None
    ) -> RunInfo: ...

    async def thread_history(self, thread: ThreadInfo) -> builtins.list[ChatMessage]: ...

    async def detail(self, run_id: str) -> RunDetail | None: ...

    async def list(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        owner: Owner = ANY_OWNER,
    ) -> RunPage: ...

    async def cancel(self, run_id: str) -> RunInfo | None: ...

    async def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo | None: ...

    async def questions(
        self, *, run_id: str | None = None, owner: Owner = ANY_OWNER
    ) -> builtins.list[ElicitationRequested]: ...

    async def webhook_deliveries(self, run_id: str) -> builtins.list[WebhookDelivery]: ...

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunInfo: ...  # noqa: ASYNC109

    def follow(
        self, run_id: str, *, after: int = 0, tokens: bool = False
    ) -> AsyncIterator[Event]: ...

    async def trajectory(self, run_id: str, rollout_id: str) -> Trajectory | None: ...

    async def final_reply(
        self, run_id: str, rollouts: Sequence[RolloutInfo]
    ) -> ModelReply | None: ...

    async def conversation_of(self, detail: RunDetail) -> builtins.list[ChatMessage]: ...

    async def summaries(self, run_id: str) -> builtins.list[TrajectorySummary]: ...


@final
class ManagerBridge:
    """``RunService`` for code on another loop than the manager's; ``loop``
    is the manager's running loop; what comes back from it goes on in
    ``turns`` (a burst of answers spread over the caller's loop turns).
    Reads (``get``, ``detail``, ``list``, ``trajectory``, ``summaries``,
    ``agents``, ``active``) run on the caller's loop, under the manager's
    lock or on the store's per-thread readers; ``submit``, ``cancel``,
    ``wait`` and ``follow`` run on the run loop, awaited from the caller's
    (cancelling the caller cancels them)."""

    def __init__(
        self, manager: RunManager, loop: asyncio.AbstractEventLoop, turns: Turns | None = None
    ) -> None:
        self.manager = manager
        self.loop = loop
        self.turns = turns or Turns()
        """Paces the answers coming back (the caller's loop)."""

    async def _on_run_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()

        future = asyncio.run_coroutine_threadsafe(call(), self.loop)
        try:
            result = await asyncio.wrap_future(future)
        except Exception:
            await self.turns.take()  # a burst of refusals (429) is a burst too
            raise
        await self.turns.take()
        return result

    async def read_on_run_loop(self, read: Callable[[], T]) -> T:
        """``read()``, called on the run loop: for state that only that loop
        may touch.  Waits behind the run loop's work; not for hot paths."""

        async def call() -> T:
            return read()

        return await self._on_run_loop(call)

    async def ask_on_run_loop(self, ask: Callable[[], Awaitable[T]]) -> T:
        """``await ask()`` on the run loop (a question for an actor there)."""
        return await self._on_run_loop(ask)

    # -- state ---------------------------------------------------------------

    @property
    def config(self) -> DaemonConfig:
        return self.manager.config

    @property
    def accepting(self) -> bool:
        return self.manager.accepting

    @property
    def usd_caps(self) -> bool:
        return self.manager.usd_caps

    @property
    def ready(self) -> bool:
        return self.manager.ready

    def agents(self) -> builtins.list[AgentInfo]:
        return self.manager.agents()

    def active(self) -> int:
        return self.manager.active()

    async def backend_health(self) -> dict[str, BackendHealth]:
        """Probed on the run loop, where the backends' connections live."""
        return await self._on_run_loop(self.manager.backend_health)

    async def mcp_authorizations(self) -> builtins.list[McpAuthorizationRequired]:
        return await self._on_run_loop(self.manager.mcp_authorizations)

    # -- reads, on this loop ---------------------------------------------------

    async def get(self, run_id: str) -> RunInfo | None:
        return await self.manager.get(run_id)

    async def detail(self, run_id: str) -> RunDetail | None:
        return await self.manager.detail(run_id)

    async def thread(self, thread_id: str) -> ThreadInfo | None:
        return await self.manager.thread(thread_id)

    async def final_reply(self, run_id: str, rollouts: Sequence[RolloutInfo]) -> ModelReply | None:
        return await self.manager.final_reply(run_id, rollouts)

    async def conversation_of(self, detail: RunDetail) -> builtins.list[ChatMessage]:
        return await self.manager.conversation_of(detail)

    async def thread_history(self, thread: ThreadInfo) -> builtins.list[ChatMessage]:
        return await self.manager.thread_history(thread)

    async def list_threads(
        self, *, limit: int = 50, owner: Owner = ANY_OWNER
    ) -> builtins.list[ThreadInfo]:
        return await self.manager.list_threads(limit=limit, owner=owner)

    async def list(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        owner: Owner = ANY_OWNER,
    ) -> RunPage:
        return await self.manager.list(status=status, limit=limit, cursor=cursor, owner=owner)

    async def trajectory(self, run_id: str, rollout_id: str) -> Trajectory | None:
        return await self.manager.trajectory(run_id, rollout_id)

    async def summaries(self, run_id: str) -> builtins.list[TrajectorySummary]:
        return await self.manager.summaries(run_id)

    # -- actions, on the run loop ----------------------------------------------

    async def submit(
        self, request: RunRequest, *, run_id: str | None = None, owner: str | None = None
    ) -> RunInfo:
        return await self._on_run_loop(
            lambda: self.manager.submit(request, run_id=run_id, owner=owner)
        )

    async def create_thread(
        self, metadata: dict[str, str], *, owner: str | None = None
    ) -> ThreadInfo:
        return await self._on_run_loop(lambda: self.manager.create_thread(metadata, owner=owner))

    async def delete_thread(self, thread_id: str) -> bool:
        return await self._on_run_loop(lambda: self.manager.delete_thread(thread_id))

    async def submit_in_thread(
        self, thread_id: str, request: RunRequest, *, owner: str | None = None
    ) -> RunInfo:
        return await self._on_run_loop(
            lambda: self.manager.submit_in_thread(thread_id, request, owner=owner)
        )

    async def cancel(self, run_id: str) -> RunInfo | None:
        return await self._on_run_loop(lambda: self.manager.cancel(run_id))

    async def answer_elicitation(
        self, run_id: str, question_id: str, answer: ElicitationAnswer
    ) -> RunInfo | None:
        return await self._on_run_loop(
            lambda: self.manager.answer_elicitation(run_id, question_id, answer)
        )

    async def questions(
        self, *, run_id: str | None = None, owner: Owner = ANY_OWNER
    ) -> builtins.list[ElicitationRequested]:
        """Read on the run loop, where the questions wait."""
        return await self._on_run_loop(lambda: self.manager.questions(run_id=run_id, owner=owner))

    async def webhook_deliveries(self, run_id: str) -> builtins.list[WebhookDelivery]:
        return await self.manager.webhook_deliveries(run_id)

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunInfo:  # noqa: ASYNC109
        return await self._on_run_loop(lambda: self.manager.wait(run_id, timeout=timeout))

    def follow(self, run_id: str, *, after: int = 0, tokens: bool = False) -> AsyncIterator[Event]:
        """Batches of events fetched on the run loop (each call waits there
        until there is something new or the run is over); ``tokens``: as
        ``RunManager.follow``."""

        async def next_batch(after: int, cursor: int | None) -> EventBatch:
            return await self._on_run_loop(
                lambda: self.manager.next_batch(run_id, after=after, tokens_after=cursor)
            )

        return follow_batches(next_batch, after=after, tokens=tokens)


__all__ = ["ManagerBridge", "RunService"]
