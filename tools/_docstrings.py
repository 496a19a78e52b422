"""Docstrings as tool descriptions: the summary and per-argument text.

Owns ``parse_docstring``: the first paragraph becomes a tool's description,
and the argument descriptions come from a Google-style ``Args:`` section, a
NumPy-style ``Parameters`` section, or Sphinx ``:param name:`` fields.  It is
a reader for well-formed docstrings, not a validator: what it cannot read it
leaves out.

Pure text processing; imports nothing from the project.
"""

from __future__ import annotations

import inspect
import re
from typing import Final

__all__ = ["ParsedDocstring", "parse_docstring"]

_GOOGLE_HEADERS: Final = frozenset({"args", "arguments", "parameters", "params"})
_OTHER_HEADERS: Final = frozenset(
    {
        "returns",
        "return",
        "yields",
        "raises",
        "examples",
        "example",
        "notes",
        "note",
        "see also",
        "attributes",
        "references",
        "warnings",
        "other parameters",
    }
)
_GOOGLE_ENTRY: Final = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)")
_NUMPY_ENTRY: Final = re.compile(r"(?P<names>\w+(?:\s*,\s*\w+)*)\s*(?::.*)?")
_SPHINX_PARAM: Final = re.compile(r":param\s+(?:[^:]*\s)?(?P<name>\w+)\s*:\s*(?P<text>.*)")
_UNDERLINE: Final = re.compile(r"\s*-{3,}\s*")


class ParsedDocstring:
    """``summary`` (the first paragraph, one line) and ``params`` (argument
    name -> description)."""

    __slots__ = ("params", "summary")

    def __init__(self, summary: str, params: dict[str, str]) -> None:
        self.summary = summary
        self.params = params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_header(lines: list[str], i: int) -> bool:
    """A section header: ``Args:`` (Google) or a word underlined by dashes
    (NumPy)."""
    text = lines[i].strip().lower()
    google = text.endswith(":") and text[:-1] in (_GOOGLE_HEADERS | _OTHER_HEADERS)
    numpy = i + 1 < len(lines) and bool(_UNDERLINE.fullmatch(lines[i + 1])) and bool(text)
    return google or numpy


def _join(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def _google(lines: list[str], start: int) -> dict[str, str]:
    """Entries of a Google section whose header is ``lines[start]``."""
    header_indent = _indent(lines[start])
    params: dict[str, str] = {}
    name: str | None = None
    entry_indent: int | None = None
    parts: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break
        match = _GOOGLE_ENTRY.fullmatch(line.strip())
        if match and (entry_indent is None or indent == entry_indent):
            if name is not None:
                params[name] = _join(parts)
            entry_indent = indent
            name, parts = match["name"], [match["text"]]
        elif name is not None:
            parts.append(line)
    if name is not None:
        params[name] = _join(parts)
    return params


def _numpy(lines: list[str], start: int) -> dict[str, str]:
    """Entries of a NumPy section whose header is ``lines[start]`` (the
    underline is ``lines[start + 1]``)."""
    header_indent = _indent(lines[start])
    params: dict[str, str] = {}
    names: list[str] = []
    parts: list[str] = []
    i = start + 2
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent(line) <= header_indent and _is_header(lines, i):
            break
        if line.strip() and _indent(line) == header_indent:
            for n in names:
                params[n] = _join(parts)
            match = _NUMPY_ENTRY.fullmatch(line.strip())
            names = [n.strip() for n in match["names"].split(",")] if match else []
            parts = []
        elif line.strip():
            parts.append(line)
        i += 1
    for n in names:
        params[n] = _join(parts)
    return params


def _sphinx(lines: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    name: str | None = None
    parts: list[str] = []
    for line in lines:
        match = _SPHINX_PARAM.match(line.strip())
        if match:
            if name is not None:
                params[name] = _join(parts)
            name, parts = match["name"], [match["text"]]
        elif name is not None and line.strip() and not line.strip().startswith(":"):
            parts.append(line)
        elif name is not None:
            params[name] = _join(parts)
            name = None
    if name is not None:
        params[name] = _join(parts)
    return params


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Read ``doc`` (as written, or already cleaned)."""
    if not doc or not doc.strip():
        return ParsedDocstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        if not line.strip() or _is_header(lines, i) or line.strip().startswith(":"):
            break
        summary.append(line)
    params: dict[str, str] = {}
    for i, line in enumerate(lines):
        text = line.strip().lower()
        if text.endswith(":") and text[:-1] in _GOOGLE_HEADERS:
            params.update(_google(lines, i))
        elif text in _GOOGLE_HEADERS and _is_header(lines, i):
            params.update(_numpy(lines, i))
    for name, text in _sphinx(lines).items():
        params.setdefault(name, text)
    return ParsedDocstring(_join(summary), {k: v for k, v in params.items() if v})
