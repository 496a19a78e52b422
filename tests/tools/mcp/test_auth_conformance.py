"""The MCP conformance suite's ``auth/*`` client scenarios
(``@modelcontextprotocol/conformance@0.1.13``; Node 20) run against an
OAuth client built on agentrt's API (``examples/mcp_conformance_auth_client.py``)
and, as the yardstick, one written directly on the SDK
(``conformance_sdk_auth_client.py``): agentrt passes every check the SDK
client passes, scenario by scenario.

``auth/metadata-var2`` and ``-var3`` fail for both: the suite's
authorization server at ``/tenant1`` publishes metadata whose ``issuer``
lacks the path, which the SDK refuses (RFC 8414 section 3.3).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
AGENTRT_CLIENT = ROOT / "examples" / "mcp_conformance_auth_client.py"
SDK_CLIENT = Path(__file__).with_name("conformance_sdk_auth_client.py")

SCENARIOS = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/resource-mismatch",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
]
#: Refused by the SDK's issuer check (see the module docstring).
SDK_REFUSES = {"auth/metadata-var2", "auth/metadata-var3"}

pytestmark = [pytest.mark.slow, pytest.mark.process]  # each scenario starts the suite twice (~5 s)


def _counts(output: str) -> tuple[int, int, int]:
    found = re.search(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings", output)
    assert found is not None, output[-2000:]
    return int(found.group(1)), int(found.group(2)), int(found.group(4))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_auth_scenarios_match_the_sdk_client(
    conformance_client: Callable[[Path, str], tuple[int, str]], scenario: str
) -> None:
    code, output = conformance_client(AGENTRT_CLIENT, scenario)
    sdk_code, sdk_output = conformance_client(SDK_CLIENT, scenario)
    passed, total, warnings = _counts(output)
    assert _counts(sdk_output) == (passed, total, warnings), (output[-3000:], sdk_output[-3000:])
    if scenario in SDK_REFUSES:
        assert code != 0
        assert sdk_code != 0
        assert "issuer mismatch" in output
        assert "authorization required for MCP server 'conformance'" in output
    else:
        assert code == 0, output[-3000:]
        assert passed == total > 0
        assert warnings == 0
