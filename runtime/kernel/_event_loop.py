"""Running an async entry point on the event loop agentrt wants.

``run(main, *args)`` runs ``main`` with anyio on the asyncio backend, with
uvloop when it is installed (the default on Linux) and plain asyncio
otherwise.  The actor kernel needs the asyncio backend
(docs/design/event-loop.md), so there is no trio option.  This module must
not import agents, tools or aggregators.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, Unpack

import anyio

T = TypeVar("T")
PosArgsT = TypeVarTuple("PosArgsT")


def uvloop_available() -> bool:
    """Whether uvloop can be imported here."""
    return importlib.util.find_spec("uvloop") is not None


def run(
    main: Callable[[Unpack[PosArgsT]], Awaitable[T]],
    *args: *PosArgsT,
    use_uvloop: bool | None = None,
) -> T:
    """Run ``main(*args)`` to completion and return its result.

    ``use_uvloop=None`` means "when installed"; ``False`` forces plain
    asyncio; ``True`` requires uvloop (anyio raises if it is missing).
    """
    if use_uvloop is None:
        use_uvloop = uvloop_available()
    return anyio.run(main, *args, backend="asyncio", backend_options={"use_uvloop": use_uvloop})
