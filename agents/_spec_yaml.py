"""YAML with line numbers: parsing spec files and placing errors in them.

Owns ``parse_yaml`` (one document, read with PyYAML's safe loader; the
composed node tree is kept beside the data, because its nodes carry the
line of every key and value; duplicate keys are an error, where plain YAML
keeps the last silently), ``locate`` (a pydantic error location such as
``("agents", "planner", "tools", 2)`` -> the line of that key in the file
and the key path ``agents.planner.tools[2]``), and the errors:
``SpecProblem`` (one problem: file, line, key path, message) and
``SpecError`` (a ``ConfigError`` carrying one or more problems).

Pure functions over text and nodes; no agentrt imports beyond errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic import ValidationError

from agentrt.runtime.kernel._errors import ConfigError

if TYPE_CHECKING:
    import yaml  # loaded by the functions that read a document: a run needs none

Loc = tuple[str | int, ...]
"""A location in a document: keys and list indexes."""

#: Problems listed in full in one error's message; the rest are counted.
MAX_LISTED: Final = 5


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One problem of a spec file."""

    file: str
    line: int | None
    key: str
    message: str

    @property
    def where(self) -> str:
        """``file:line: key`` (the parts that are known)."""
        place = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{place}: {self.key}" if self.key else place

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class SpecError(ConfigError):
    """A spec file is malformed; ``problems`` lists each (file, line, key)."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        if not problems:
            raise ValueError("a SpecError needs at least one problem")
        self.problems = list(problems)
        first, rest = self.problems[0], self.problems[1:]
        message = first.message
        if rest:
            listed = "; ".join(str(p) for p in rest[: MAX_LISTED - 1])
            more = len(rest) - (MAX_LISTED - 1)
            message += f"; also: {listed}" + (f" (and {more} more)" if more > 0 else "")
        super().__init__(message, where=first.where)

    @classmethod
    def one(cls, file: str | Path, message: str, *, line: int | None = None, key: str = "") -> Self:
        return cls([SpecProblem(str(file), line, key, message)])


def parse_yaml(text: str, file: str) -> tuple[Any, yaml.Node | None]:
    """The document's data and its node tree; ``SpecError`` with the line
    of a syntax error or a duplicate key.  An empty document is ``None``."""
    import yaml  # see the note at the imports

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        duplicates = list(_duplicate_keys(node))
        if duplicates:
            raise SpecError(
                [
                    SpecProblem(
                        file,
                        key.start_mark.line + 1,
                        key_path,
                        f"duplicate key {key.value!r} (first at line {first.start_mark.line + 1})",
                    )
                    for key, first, key_path in duplicates
                ]
            )
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p) or "malformed YAML"
        line = mark.line + 1 if mark is not None else None
        column = f", column {mark.column + 1}" if mark is not None else ""
        raise SpecError.one(file, f"invalid YAML{column}: {what}", line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError.one(file, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _duplicate_keys(
    root: yaml.Node,
) -> Iterable[tuple[yaml.ScalarNode, yaml.ScalarNode, str]]:
    """(duplicate key node, first key node, path of the mapping) for each
    repeated key; aliases are followed once."""
    import yaml

    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.ScalarNode] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in first:
                        yield key, first[key.value], _join(path, key.value)
                    else:
                        first[key.value] = key
                    stack.append((value, _join(path, key.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def locate(
    root: yaml.Node | None, loc: Loc, *, skip: frozenset[str] = frozenset()
) -> tuple[int | None, str]:
    """The line and key path of ``loc`` in the document under ``root``.

    Elements of ``loc`` that are no key of the mapping at hand (pydantic's
    union tags, validator names, ``skip``) are passed over; a last key that
    is absent (a missing key) is named at its mapping's line.  The line of
    a mapping's key is given for the key and its value alike."""
    import yaml

    node = root
    line = None if root is None else root.start_mark.line + 1
    path = ""
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(part, str) and (part in skip or part == "[key]"):
            continue
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and k.value == part
                ),
                None,
            )
            if match is not None:
                key_node, node = match
                line, path = key_node.start_mark.line + 1, _join(path, part)
            elif last:
                path = _join(path, part)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if 0 <= part < len(node.value):
                node = node.value[part]
                line, path = node.start_mark.line + 1, _join(path, part)
        elif node is None:
            path = _join(path, part)
        elif isinstance(node, yaml.ScalarNode):
            break
    return line, path


def problems_from(
    error: ValidationError,
    file: str,
    root: yaml.Node | None,
    *,
    prefix: Loc = (),
    skip: frozenset[str] = frozenset(),
) -> list[SpecProblem]:
    """Each validation problem placed in the file (``prefix``: where the
    validated data sits in the document)."""
    problems: list[SpecProblem] = []
    for e in error.errors(include_url=False):
        loc: Loc = (*prefix, *e["loc"])
        ctx = e.get("ctx") or {}
        kind = e["type"]
        if kind == "unknown_key":
            loc = (*loc, str(ctx["key"]))
        line, key = locate(root, loc, skip=skip)
        if kind == "missing":
            message = "missing required key"
        elif kind == "extra_forbidden":
            message = f"unknown key {str(loc[-1])!r}"
        else:
            message = e["msg"].removeprefix("Value error, ")
        problems.append(SpecProblem(file, line, key, message))
    return problems


def check(condition: bool, file: str, root: yaml.Node | None, loc: Loc, message: str) -> None:
    """Raise a one-problem ``SpecError`` at ``loc`` unless ``condition``."""
    if not condition:
        line, key = locate(root, loc)
        raise SpecError([SpecProblem(file, line, key, message)])


__all__ = [
    "MAX_LISTED",
    "Loc",
    "SpecError",
    "SpecProblem",
    "check",
    "locate",
    "parse_yaml",
    "problems_from",
]
