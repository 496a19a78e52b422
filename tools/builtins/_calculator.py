"""A safe calculator: arithmetic expressions, never code.

Owns ``evaluate`` and the ``Calculator`` tool.  The expression is parsed with
``ast`` and walked by a small interpreter that knows only numbers, ``+ - * /
// % **``, unary ``+ -``, parentheses, the constants ``pi``, ``e``, ``tau``
and a whitelist of ``math`` functions.  Nothing is ever ``eval``-ed; names,
attributes, subscripts, calls to anything else are refused with a message
saying what is allowed.  Sizes are bounded before computing: the expression's
length and node count, integer results (``9**9**9`` is refused at once, not
computed), ``factorial``'s argument; float overflow is an error, not ``inf``.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, NoReturn, final

from pydantic import Field

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ToolError
from agentrt.tools._function import FunctionTool
from agentrt.tools._tool import ToolContext, ToolOutput
from agentrt.tools._validation import ArgumentProblem

__all__ = ["Calculator", "evaluate"]

Number = int | float

#: Defaults: an expression a model would write fits easily; a result of
#: 10,000 bits is about 3,000 decimal digits.
MAX_LENGTH: Final = 1_000
MAX_NODES: Final = 300
MAX_INT_BITS: Final = 10_000
MAX_FACTORIAL: Final = 1_000

_CONSTANTS: Final[Mapping[str, float]] = {"pi": math.pi, "e": math.e, "tau": math.tau}

#: name -> (function, min args, max args)
_FUNCTIONS: Final[Mapping[str, tuple[Callable[..., Any], int, int]]] = {
    "abs": (abs, 1, 1),
    "round": (round, 1, 2),
    "min": (min, 2, 16),
    "max": (max, 2, 16),
    "sqrt": (math.sqrt, 1, 1),
    "cbrt": (math.cbrt, 1, 1),
    "exp": (math.exp, 1, 1),
    "log": (math.log, 1, 2),
    "log2": (math.log2, 1, 1),
    "log10": (math.log10, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "atan2": (math.atan2, 2, 2),
    "sinh": (math.sinh, 1, 1),
    "cosh": (math.cosh, 1, 1),
    "tanh": (math.tanh, 1, 1),
    "hypot": (math.hypot, 2, 16),
    "degrees": (math.degrees, 1, 1),
    "radians": (math.radians, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "factorial": (math.factorial, 1, 1),
    "gcd": (math.gcd, 2, 16),
}

_BINARY: Final[Mapping[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
}

_REFUSED: Final[Mapping[type[ast.AST], str]] = {
    ast.Attribute: "attribute access (a.b)",
    ast.Subscript: "indexing (a[b])",
    ast.Lambda: "lambda",
    ast.Compare: "comparisons",
    ast.BoolOp: "and/or",
    ast.IfExp: "conditional expressions",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.JoinedStr: "strings",
    ast.NamedExpr: "assignment (:=)",
    ast.Starred: "unpacking (*x)",
}


def _allowed_names() -> str:
    return f"constants {', '.join(_CONSTANTS)}; functions {', '.join(sorted(_FUNCTIONS))}"


def _refuse(node: ast.AST) -> NoReturn:
    """Say why ``node`` is not arithmetic the calculator does."""
    match node:
        case ast.Constant(value=value):
            raise ToolError(f"unsupported literal {value!r}: only numbers are allowed")
        case ast.Name(id=name):
            raise ToolError(f"unknown name '{name}'; allowed: {_allowed_names()}")
        case ast.BinOp(op=ast.BitXor()):
            raise ToolError("'^' is not supported; write powers with '**'")
        case ast.BinOp(op=op) | ast.UnaryOp(op=op):
            raise ToolError(f"operator {type(op).__name__} is not supported")
        case ast.Call():
            raise ToolError(
                "only calls like name(x, y) to allowed functions are supported; "
                f"allowed: {_allowed_names()}"
            )
        case _:
            what = _REFUSED.get(type(node), type(node).__name__)
            raise ToolError(f"{what} not supported: only arithmetic is allowed")


@final
class _Interpreter:
    __slots__ = ("_max_bits",)

    def __init__(self, max_int_bits: int) -> None:
        self._max_bits = max_int_bits

    def eval(self, node: ast.AST) -> Number:
        match node:
            case ast.Expression(body=body):
                return self.eval(body)
            case ast.Constant(value=int() | float() as value) if not isinstance(value, bool):
                return self._checked(value)
            case ast.Name(id=name) if name in _CONSTANTS:
                return _CONSTANTS[name]
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() as op, operand=operand):
                value = self.eval(operand)
                return -value if isinstance(op, ast.USub) else value
            case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
                return self._binary(type(op), self.eval(left), self.eval(right))
            case ast.Call(func=ast.Name(id=name), args=args, keywords=[]):
                return self._call(name, args)
        _refuse(node)

    def _checked(self, value: Any) -> Number:
        if isinstance(value, complex):
            raise ToolError(
                "the result is a complex number (e.g. a fractional power of a negative)"
            )
        if isinstance(value, int) and value.bit_length() > self._max_bits:
            raise ToolError(f"the result exceeds {self._max_bits} bits; refusing to compute it")
        if isinstance(value, float) and not math.isfinite(value):
            raise ToolError("the result overflows a float (it is infinite or undefined)")
        return value  # type: ignore[no-any-return]

    def _binary(self, op: type[ast.operator], a: Number, b: Number) -> Number:
        symbol, fn = _BINARY[op]
        if op is ast.Pow and isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
            estimated_bits = b * math.log2(abs(a))
            if estimated_bits > self._max_bits:
                raise ToolError(
                    f"{a} ** {b} would have about {int(estimated_bits * 0.30103) + 1} digits, "
                    f"over the limit of {self._max_bits} bits; refusing to compute it"
                )
        if (
            op is ast.Mult
            and isinstance(a, int)
            and isinstance(b, int)
            and a.bit_length() + b.bit_length() > self._max_bits + 1
        ):
            raise ToolError(f"the product exceeds {self._max_bits} bits; refusing to compute it")
        try:
            return self._checked(fn(a, b))
        except ZeroDivisionError:
            raise ToolError(f"division by zero in '{symbol}'") from None
        except OverflowError as exc:
            raise ToolError(f"'{symbol}' overflowed: {exc}") from None

    def _call(self, name: str, arg_nodes: list[ast.expr]) -> Number:
        entry = _FUNCTIONS.get(name)
        if entry is None:
            raise ToolError(f"unknown function '{name}'; allowed: {_allowed_names()}")
        args = [self.eval(a) for a in arg_nodes]
        fn, least, most = entry
        if not least <= len(args) <= most:
            wanted = str(least) if least == most else f"{least} to {most}"
            raise ToolError(f"{name}() takes {wanted} arguments, got {len(args)}")
        if name == "factorial" and args[0] > MAX_FACTORIAL:
            raise ToolError(f"factorial() is limited to arguments up to {MAX_FACTORIAL}")
        if name == "round" and len(args) == 2 and not isinstance(args[1], int):
            raise ToolError("round()'s second argument must be an integer")
        try:
            return self._checked(fn(*args))
        except (ValueError, TypeError) as exc:
            shown = ", ".join(repr(a) for a in args)
            raise ToolError(f"{name}({shown}) is undefined: {exc}") from None
        except ZeroDivisionError:
            raise ToolError(f"division by zero in {name}()") from None
        except OverflowError as exc:
            raise ToolError(f"{name}() overflowed: {exc}") from None


def evaluate(
    expression: str,
    *,
    max_length: int = MAX_LENGTH,
    max_int_bits: int = MAX_INT_BITS,
) -> Number:
    """The value of an arithmetic expression; ``ToolError`` saying what is
    wrong otherwise."""
    text = expression.strip()
    if not text:
        raise ToolError("the expression is empty")
    if len(text) > max_length:
        raise ToolError(f"the expression is {len(text)} characters; the limit is {max_length}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not a valid expression: {exc.msg} (column {exc.offset})") from None
    except (RecursionError, MemoryError):
        raise ToolError("the expression is nested too deeply") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ToolError(f"the expression has {nodes} parts; the limit is {MAX_NODES}")
    try:
        return _Interpreter(max_int_bits).eval(tree)
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None


def _format(value: Number) -> str:
    return repr(value) if isinstance(value, float) else str(value)


@final
class Calculator:
    """The ``calculator`` tool: ``{"expression": "2 * (3 + 4) ** 2"}`` ->
    ``"98"``."""

    __slots__ = ("_max_int_bits", "_max_length", "_tool")

    def __init__(
        self,
        *,
        name: str = "calculator",
        max_length: int = MAX_LENGTH,
        max_int_bits: int = MAX_INT_BITS,
    ) -> None:
        self._max_length = max_length
        self._max_int_bits = max_int_bits
        self._tool = FunctionTool.from_callable(
            self._calculate,
            name=name,
            description=(
                "Evaluate an arithmetic expression exactly (big integers) or in floating "
                "point. Supports + - * / // % ** and parentheses, the constants pi, e, tau, "
                f"and the functions {', '.join(sorted(_FUNCTIONS))}."
            ),
        )

    async def _calculate(  # async: it runs inline, bounded by the limits above
        self,
        expression: Annotated[
            str, Field(description="The expression, e.g. 'sqrt(2) * (3 + 4) ** 2'.")
        ],
    ) -> str:
        return _format(
            evaluate(expression, max_length=self._max_length, max_int_bits=self._max_int_bits)
        )

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON schema offered to the model."""
        return self._tool.spec

    def argument_problems(self, arguments: object) -> list[ArgumentProblem]:
        """What is wrong with ``arguments``; ``call`` validates them itself
        (``agentrt.tools._validation.ArgumentChecker``)."""
        return self._tool.argument_problems(arguments)

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Evaluate ``arguments["expression"]``; errors come back as text."""
        return await self._tool.call(arguments, context)
