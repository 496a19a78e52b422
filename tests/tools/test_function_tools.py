"""Python functions as tools: schemas from signatures, validation, calls."""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import msgspec
import pytest
from pydantic import BaseModel, Field

from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.tools import FunctionTool, Tool, ToolContext, ToolOutput, tool
from agentrt.tools._docstrings import parse_docstring

CTX = ToolContext(run_id="r1", call_id="c1")


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Longer explanation that is not part of the summary.

    Args:
        a: The first number.
        b: The second
            number.
    """
    return a + b


class Address(BaseModel):
    street: str
    number: int = 1


class Reading(msgspec.Struct):
    sensor: str
    value: float


def lookup(
    query: Annotated[str, Field(description="What to look for.")],
    mode: Literal["fast", "exact"] = "fast",
    limit: int | None = None,
    tags: list[str] | None = None,
    where: Address | None = None,
) -> dict[str, Any]:
    """Look something up."""
    return {"query": query, "mode": mode, "limit": limit, "tags": tags, "where": where}


def test_schema_of_a_simple_function_is_exact() -> None:
    t = FunctionTool.from_callable(add)
    assert t.spec.name == "add"
    assert t.spec.description == "Add two numbers."
    assert t.spec.parameters == {
        "additionalProperties": False,
        "properties": {
            "a": {"description": "The first number.", "type": "integer"},
            "b": {"default": 2, "description": "The second number.", "type": "integer"},
        },
        "required": ["a"],
        "type": "object",
    }


def test_schema_with_literal_optional_list_and_nested_model_is_exact() -> None:
    t = FunctionTool.from_callable(lookup, name="find", description="Find it.")
    assert (t.spec.name, t.spec.description) == ("find", "Find it.")
    assert t.spec.parameters == {
        "$defs": {
            "Address": {
                "properties": {
                    "street": {"type": "string"},
                    "number": {"default": 1, "type": "integer"},
                },
                "required": ["street"],
                "title": "Address",
                "type": "object",
            }
        },
        "additionalProperties": False,
        "properties": {
            "query": {"description": "What to look for.", "type": "string"},
            "mode": {"default": "fast", "enum": ["fast", "exact"], "type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "tags": {
                "anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
                "default": None,
            },
            "where": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
        "type": "object",
    }


def test_awkward_parameter_names_and_field_defaults() -> None:
    def f(
        schema: int, copy: str = Field("x", description="A copy."), ctx: ToolContext = CTX
    ) -> str:
        return f"{schema}{copy}{ctx.run_id}"

    t = FunctionTool.from_callable(f)
    props = t.spec.parameters["properties"]
    assert set(props) == {"schema", "copy"}  # the context parameter is not offered
    assert props["copy"] == {"default": "x", "description": "A copy.", "type": "string"}


@pytest.mark.parametrize(
    ("doc", "summary", "params"),
    [
        (
            "Summary line\ncontinued.\n\nArgs:\n    x (int): The x.\n    y: The y,\n        long.\n"
            "\nReturns:\n    z: not a parameter.",
            "Summary line continued.",
            {"x": "The x.", "y": "The y, long."},
        ),
        (
            "Numpy style.\n\nParameters\n----------\nx : int\n    The x.\ny, z : str\n    Both."
            "\n\nReturns\n-------\nint\n    not a parameter.",
            "Numpy style.",
            {"x": "The x.", "y": "Both.", "z": "Both."},
        ),
        (
            "Sphinx style.\n\n:param x: The x.\n:param str y: The y.\n:returns: r",
            "Sphinx style.",
            {"x": "The x.", "y": "The y."},
        ),
        ("", "", {}),
    ],
)
def test_docstring_styles(doc: str, summary: str, params: dict[str, str]) -> None:
    parsed = parse_docstring(doc)
    assert (parsed.summary, parsed.params) == (summary, params)


@pytest.mark.anyio
async def test_validation_errors_name_each_argument() -> None:
    t = FunctionTool.from_callable(lookup)
    out = await t.call({"mode": "slow", "limit": "many", "where": {"number": 3}, "x": 1}, CTX)
    assert out.is_error
    problems = {p["argument"]: p["message"] for p in out.structured["problems"]}
    assert set(problems) == {"query", "mode", "limit", "where.street", "x"}
    assert problems["query"] == "missing required argument"
    assert "'slow'" in problems["mode"]
    assert problems["x"].startswith("unexpected argument")
    for name in problems:
        assert f"- {name}: " in out.text


@pytest.mark.anyio
async def test_arguments_that_are_not_an_object_are_an_error() -> None:
    out = await FunctionTool.from_callable(add).call([1, 2], CTX)  # type: ignore[arg-type]
    assert out.is_error
    assert "JSON object" in out.text


@pytest.mark.anyio
async def test_sync_functions_run_in_a_worker_thread() -> None:
    seen: list[threading.Thread] = []

    @tool
    def where_am_i(n: int) -> int:
        seen.append(threading.current_thread())
        return n * 2

    out = await where_am_i.call({"n": 21}, CTX)
    assert (out.text, out.is_error) == (str(42), False)
    assert seen
    assert seen[0] is not threading.current_thread()
    assert where_am_i(4) == 8  # still callable as the function


@pytest.mark.anyio
async def test_async_functions_are_awaited_and_get_the_context() -> None:
    @tool(name="echo_ctx", description="Echo.")
    async def echo(text: str, ctx: ToolContext) -> list[str]:
        return [text, ctx.run_id, ctx.call_id]

    out = await echo.call({"text": "hi"}, CTX)
    assert out.structured == ["hi", CTX.run_id, CTX.call_id]
    assert msgspec.json.decode(out.text) == out.structured
    assert echo.spec.name == "echo_ctx"


@pytest.mark.anyio
async def test_return_values_become_text_or_json() -> None:
    @tool
    def model_value(street: str) -> Address:
        return Address(street=street)

    @tool
    def struct_value(sensor: str) -> Reading:
        return Reading(sensor=sensor, value=0.5)

    @tool
    def nested(where: Address) -> dict[str, Any]:
        return {"where": where, "ok": True}

    out = await model_value.call({"street": "Main"}, CTX)
    assert msgspec.json.decode(out.text) == Address(street="Main").model_dump()
    out = await struct_value.call({"sensor": "t"}, CTX)
    assert out.structured == {"sensor": "t", "value": 0.5}
    out = await nested.call({"where": {"street": "A", "number": "7"}}, CTX)
    assert out.structured == {"where": {"street": "A", "number": 7}, "ok": True}


@pytest.mark.anyio
async def test_exceptions_become_error_outputs() -> None:
    @tool
    def refuses(x: int) -> str:
        raise ToolError(f"cannot handle {x}")

    @tool
    async def buggy(x: int) -> str:
        return str(1 // x)

    out = await refuses.call({"x": 3}, CTX)
    assert (out.is_error, out.text) == (True, "cannot handle 3")
    out = await buggy.call({"x": 0}, CTX)
    assert out.is_error
    assert out.text.startswith("ZeroDivisionError")


@pytest.mark.anyio
async def test_tool_output_passes_through_and_protocol_holds() -> None:
    @tool
    def raw(flag: bool) -> ToolOutput:
        return ToolOutput.of_text("custom", is_error=flag)

    assert isinstance(raw, Tool)
    out = await raw.call({"flag": True}, CTX)
    assert (out.text, out.is_error) == ("custom", True)


def test_signatures_that_cannot_be_tools_are_config_errors() -> None:
    def star(*args: int) -> None: ...

    def untyped(x) -> None:  # type: ignore[no-untyped-def]
        ...

    def weird(x: threading.Lock) -> None: ...

    for fn, needle in ((star, r"\*args"), (untyped, "type hint"), (weird, "schema")):
        with pytest.raises(ConfigError, match=needle):
            FunctionTool.from_callable(fn)
    with pytest.raises(ConfigError, match="name"):
        FunctionTool.from_callable(lambda x: x)
