"""Python functions as tools, described by their type hints: ``FunctionTool``
and the ``@tool`` decorator.

Imports protocols, the runtime floor and the tools base; never agents or
aggregators.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, final, overload

import anyio.to_thread
import msgspec
import pydantic
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from agentrt.protocols._tools import ToolSpec
from agentrt.runtime.kernel._errors import ConfigError, ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._docstrings import parse_docstring
from agentrt.tools._tool import ToolContent, ToolContext, ToolOutput
from agentrt.tools._validation import ArgumentProblem, invalid_arguments, short_repr

__all__ = ["FunctionTool", "to_tool_output", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

_log = get_logger(__name__)


class _SchemaWithoutTitles(GenerateJsonSchema):
    """Pydantic's schema minus the per-field titles (noise in a prompt)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _callable_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations of a function, method, partial or callable object."""
    if isinstance(fn, functools.partial):
        return _type_hints(fn.func)
    target: Any = fn if inspect.isroutine(fn) else type(fn).__call__
    return typing.get_type_hints(target, include_extras=True)


def _is_async(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in annotation.__metadata__)


def _problems_from(error: ValidationError, accepted: list[str]) -> list[ArgumentProblem]:
    hint = f"expected one of: {', '.join(accepted)}" if accepted else "takes no arguments"
    found: list[ArgumentProblem] = []
    for e in error.errors(include_url=False):
        argument = ".".join(str(part) for part in e["loc"])
        match e["type"]:
            case "missing":
                message = "missing required argument"
            case "extra_forbidden":
                message = f"unexpected argument ({hint})"
            case _:
                message = f"{e['msg']} (got {short_repr(e['input'])})"
        found.append(ArgumentProblem(argument=argument, message=message))
    return found


def _encode_hook(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise NotImplementedError(f"cannot encode {type(value).__name__} as JSON")


def to_tool_output(value: object) -> ToolOutput:
    """A function's return value as the model sees it: ``str`` and
    ``ToolOutput`` as they are, anything else (pydantic models, msgspec
    structs, dataclasses, dicts, lists, numbers) as JSON, with the same
    value in ``structured``."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput.of_text(value)
    try:
        data = msgspec.to_builtins(value, enc_hook=_encode_hook)
        text = msgspec.json.encode(data).decode()
    except (TypeError, NotImplementedError, msgspec.EncodeError):
        return ToolOutput.of_text(str(value))
    return ToolOutput(content=[ToolContent(text=text)], structured=data)


@final
class FunctionTool(Generic[P, R]):
    """A Python function offered as a tool.  Build with
    ``FunctionTool.from_callable(fn)`` or ``@tool``.  The object stays
    callable as the original function."""

    __slots__ = (
        "_accepted",
        "_args_model",
        "_context_param",
        "_fields",
        "_fn",
        "_is_async",
        "_positional",
        "_spec",
    )

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        spec: ToolSpec,
        args_model: type[BaseModel],
        positional: tuple[str, ...],
        context_param: str | None,
    ) -> None:
        self._fn = fn
        self._spec = spec
        self._args_model = args_model
        self._positional = positional
        self._context_param = context_param
        self._is_async = _is_async(fn)
        # (field, parameter name) pairs, read once: a call maps its parsed
        # arguments back to parameters without asking pydantic each time.
        self._fields = tuple(
            (key, info.alias or key) for key, info in args_model.model_fields.items()
        )
        self._accepted = sorted(spec.parameters.get("properties", {}))

    @classmethod
    def from_callable(
        cls,
        fn: Callable[P, R],
        name: str | None = None,
        description: str | None = None,
    ) -> FunctionTool[P, R]:
        """Describe ``fn`` from its signature and docstring.  ``name``
        defaults to the function's name; ``description`` to the docstring's
        first paragraph.  Raises ``ConfigError`` for a signature that cannot
        be a tool (``*args``/``**kwargs``, a parameter without a type hint,
        a type pydantic cannot describe).

        The schema is that of a pydantic model built from the signature
        (unknown arguments rejected); argument descriptions come from the
        docstring's ``Args:``/``Parameters`` section unless a ``Field`` gives
        one.  A parameter annotated ``ToolContext`` gets the call's context
        and is not offered to the model."""
        tool_name = name or getattr(fn, "__name__", "")
        where = f"tool function {_callable_name(fn)}"
        if not tool_name or tool_name == "<lambda>":
            raise ConfigError("cannot derive a tool name; pass name=...", where=where)
        try:
            signature = inspect.signature(fn)
            hints = _type_hints(fn)
        except (NameError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot read the signature: {exc}", where=where) from exc
        docs = parse_docstring(inspect.getdoc(fn))
        fields: dict[str, Any] = {}
        positional: list[str] = []
        context_param: str | None = None
        for index, param in enumerate(signature.parameters.values()):
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(
                    f"parameter '{param.name}': *args and **kwargs cannot be described to a "
                    "model; list the arguments explicitly",
                    where=where,
                )
            if param.name not in hints:
                raise ConfigError(f"parameter '{param.name}' needs a type hint", where=where)
            annotation = hints[param.name]
            if annotation is ToolContext:
                context_param = param.name
                continue
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            extra = Field(alias=param.name)
            if param.name in docs.params and not _has_description(annotation):
                extra = Field(alias=param.name, description=docs.params[param.name])
            default = ... if param.default is inspect.Parameter.empty else param.default
            # Fields get neutral names and the parameter's name as alias, so
            # parameters like `schema`, `copy` or `_x` cannot clash with
            # BaseModel's own attributes.
            fields[f"p{index}"] = (typing.Annotated[annotation, extra], default)
        try:
            model = pydantic.create_model(
                f"{tool_name}_arguments",
                __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
                **fields,
            )
            schema = model.model_json_schema(by_alias=True, schema_generator=_SchemaWithoutTitles)
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
            raise ConfigError(f"cannot build an argument schema: {exc}", where=where) from exc
        except TypeError as exc:
            raise ConfigError(f"cannot build an argument schema: {exc}", where=where) from exc
        schema.pop("title", None)
        spec = ToolSpec(
            name=tool_name,
            description=description if description is not None else docs.summary,
            parameters=schema,
        )
        return cls(
            fn,
            spec=spec,
            args_model=model,
            positional=tuple(positional),
            context_param=context_param,
        )

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON schema offered to the model."""
        return self._spec

    @property
    def fn(self) -> Callable[P, R]:
        """The wrapped function."""
        return self._fn

    @property
    def args_model(self) -> type[BaseModel]:
        """The pydantic model the arguments are validated with."""
        return self._args_model

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self._spec.name!r}, fn={_callable_name(self._fn)})"

    def _parse(self, arguments: object) -> dict[str, Any] | list[ArgumentProblem]:
        """The validated arguments by parameter name, or what is wrong."""
        if type(arguments) is not dict:  # the usual case, decoded JSON, asks no ABC
            if not isinstance(arguments, Mapping):
                return [ArgumentProblem(argument="", message="arguments must be a JSON object")]
            arguments = dict(arguments)
        try:
            # ``model_validate`` without its Python frame (once a call).
            parsed = self._args_model.__pydantic_validator__.validate_python(arguments)
        except ValidationError as exc:
            return _problems_from(exc, self._accepted)
        fields = parsed.__dict__
        values: dict[str, Any] = {}
        for key, name in self._fields:  # a loop: no comprehension frame per call
            values[name] = fields[key]
        return values

    def argument_problems(self, arguments: object) -> list[ArgumentProblem]:
        """What is wrong with calling the function with ``arguments`` (empty
        when nothing is): this tool validates its own arguments, in ``call``
        (``agentrt.tools._validation.ArgumentChecker``)."""
        parsed = self._parse(arguments)
        return parsed if isinstance(parsed, list) else []

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Validate ``arguments`` and run the function: async functions are
        awaited, sync ones run in a worker thread (abandoned, not waited for,
        on cancellation).  Invalid arguments (per argument), ``ToolError``
        (its message) and any other exception (naming its type) become error
        outputs; the return value goes through ``to_tool_output``."""
        name = self._spec.name
        values = self._parse(arguments)
        if isinstance(values, list):
            return invalid_arguments(name, values)
        args = [values.pop(p) for p in self._positional] if self._positional else ()
        if self._context_param is not None:
            values[self._context_param] = context
        fn: Callable[..., Any] = self._fn
        try:
            if self._is_async:
                result = await fn(*args, **values)
            else:
                result = await anyio.to_thread.run_sync(
                    functools.partial(fn, *args, **values), abandon_on_cancel=True
                )
        except ToolError as exc:
            return ToolOutput.of_text(str(exc), is_error=True)
        except Exception as exc:  # the model hears about it; the log keeps the traceback
            _log.warning("tool.function_raised", tool=name, exc_info=True)
            return ToolOutput.of_text(f"{type(exc).__name__}: {exc}", is_error=True)
        return to_tool_output(result)


def reduce_function_tool(tool: FunctionTool[..., Any]) -> tuple[Any, ...]:
    """How a worker process of the ``local`` placement receives a function
    tool (registered with multiprocessing's pickler; its argument model is
    made at run time and plain pickle cannot send it): the module attribute
    it is (``@tool`` on a module's function), else ``from_callable`` of its
    function.  Ray's cloudpickle sends tools by value and does not use this:
    a tool defined in a driver script's ``__main__`` is not there by name."""
    fn = tool.fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module and "<locals>" not in qualname and _attribute(module, qualname) is tool:
        return (_attribute, (module, qualname))
    return (FunctionTool.from_callable, (fn, tool.spec.name, tool.spec.description))


def _attribute(module: str, qualname: str) -> object:
    """``module.qualname`` (a dotted path inside the module), or ``None``."""
    found: object = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a function a tool: ``@tool`` or ``@tool(name=..., description=...)``."""
    if fn is not None:
        return FunctionTool.from_callable(fn, name=name, description=description)

    def decorate(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool.from_callable(f, name=name, description=description)

    return decorate
