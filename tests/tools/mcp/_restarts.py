"""What the MCP restart tests share: a fast restart policy for the
fixture server, and the event loops a restart test runs on."""

from __future__ import annotations

from typing import Any

import pytest

FAST_RESTART: dict[str, Any] = {"initial_delay_s": 0.1, "max_delay_s": 0.5, "jitter": 0.0}
"""A restart policy with no wait worth the name, for a crashing fixture server."""

#: A restart test also runs on plain asyncio (the rest on uvloop only: every
#: fixture-server start costs a second or more of CPU on a 2-core machine).
BOTH_BACKENDS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio+uvloop"),
]
