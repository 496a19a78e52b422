"""The safe calculator: arithmetic yes, code never, huge numbers refused fast."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools import Calculator, ToolContext, evaluate
from agentrt.tools.builtins import _calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 1 + 2 * 3),
        ("(1 + 2) * 3", (1 + 2) * 3),
        ("7 // 2 + 7 % 2 - -3", 7 // 2 + 7 % 2 - -3),
        ("2 ** 100", 2**100),
        ("2 ** -2", 2**-2),
        ("10 / 4", 10 / 4),
        ("sqrt(2) * pi", math.sqrt(2) * math.pi),
        ("log(8, 2) + log10(1000) + exp(0)", math.log(8, 2) + math.log10(1000) + math.exp(0)),
        ("max(1, 5, 3) - min(4, 2) + abs(-7) + round(2.567, 2)", 5 - 2 + 7 + round(2.567, 2)),
        ("factorial(20) // gcd(12, 18)", math.factorial(20) // math.gcd(12, 18)),
        ("floor(-2.5) + ceil(2.1) + atan2(1, 1)", -3 + 3 + math.atan2(1, 1)),
        ("1_000 + 0x10 + 1e3", 1000 + 16 + 1e3),
    ],
)
def test_arithmetic_is_evaluated(expression: str, expected: float) -> None:
    value = evaluate(expression)
    assert value == pytest.approx(expected)
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("().__class__", "attribute access"),
        ("(1).real", "attribute access"),
        ("pi.__class__.__bases__", "attribute access"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("__import__('os').system('true')", "only calls like name"),
        ("[1, 2][0]", "indexing"),
        ("(lambda: 1)()", "only calls like name"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1j * 2", "only numbers"),
        ("1 < 2", "comparisons"),
        ("2 ^ 3", "'**'"),
        ("sqrt(x=4)", "only calls like name"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "undefined"),
        ("(-8) ** 0.5", "complex"),
        ("1e308 * 10", "overflows"),
        ("exp(1000)", "overflowed"),
        ("factorial(100000)", "limited"),
        ("max(1)", "takes 2 to 16 arguments"),
        ("1 +", "not a valid expression"),
        ("", "empty"),
        ("1+" * 600 + "1", "limit"),
    ],
)
def test_everything_else_is_refused_with_a_reason(expression: str, needle: str) -> None:
    with pytest.raises(ToolError) as info:
        evaluate(expression)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("expression", "small_parts"),
    [
        ("9**9**9", [("**", 9, 9)]),
        ("10**10**10", [("**", 10, 10)]),
        ("(2**5000) * (2**5001)", [("**", 2, 5000), ("**", 2, 5001)]),
    ],
)
def test_huge_results_are_refused_before_computing(
    expression: str, small_parts: list[tuple[str, int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every operation goes through the operator table: record what is
    # computed; computing the huge one itself fails the test (at once).
    computed: list[tuple[str, int, int]] = []

    def recorded(symbol: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def apply(a: Any, b: Any) -> Any:
            computed.append((symbol, a, b))
            if (symbol, a, b) not in small_parts:
                raise AssertionError(f"computed {a!r} {symbol} {b!r} before refusing")
            return fn(a, b)

        return apply

    for op, (symbol, fn) in list(_calculator._BINARY.items()):
        monkeypatch.setitem(_calculator._BINARY, op, (symbol, recorded(symbol, fn)))
    with pytest.raises(ToolError, match="refusing to compute"):
        evaluate(expression)
    assert computed == small_parts  # the operands, then the refusal: nothing huge computed


@pytest.mark.anyio
async def test_as_a_tool() -> None:
    calculator = Calculator()
    assert calculator.spec.parameters["required"] == ["expression"]
    out = await calculator.call({"expression": "2 ** 64"}, ToolContext())
    assert (out.is_error, out.text) == (False, str(2**64))
    out = await calculator.call({"expression": "__import__('os')"}, ToolContext())
    assert out.is_error
    assert "__import__" in out.text
    out = await calculator.call({"expr": "1"}, ToolContext())
    assert out.is_error
    assert "- expression: missing required argument" in out.text
