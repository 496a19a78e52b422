"""Evaluation task sets: the task file format and the verifiers.

Owns ``EvalTask`` and ``load_tasks`` (JSONL, one task a line: ``task`` --
or ``question``/``prompt`` -- the expected ``answer``, optional ``id`` and
``verifier``) and the verifiers (``exact`` after normalisation, ``numeric``
with a tolerance, ``regex``, or any ``pkg.mod:fn`` callable).  Must not
run anything.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from agentrt.runtime.kernel._errors import ConfigError


class EvalTask(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a task set."""

    id: str
    task: str
    answer: str | None = None
    """The expected answer (a pattern for ``regex``)."""
    verifier: str | None = None
    """This task's verifier, overriding the run's."""


Verifier = Callable[[str | None, EvalTask], bool]
"""``(the run's answer, the task) -> correct?``"""


# -- task files ---------------------------------------------------------------


def jsonl_objects(
    path: str | Path, lines: Iterable[str]
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each non-blank line of the JSONL file ``path`` as ``(number, where,
    object)``, ``where`` being ``path:number``; ``ConfigError`` naming it for
    a line that is not a JSON object."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"not JSON: {exc}", where=where) from None
        if not isinstance(raw, dict):
            raise ConfigError("each line must be a JSON object", where=where)
        yield number, where, raw


def load_tasks(path: str | Path) -> list[EvalTask]:
    """Read a JSONL task file; a bad line is a ``ConfigError`` naming it."""
    tasks: list[EvalTask] = []
    for number, where, raw in jsonl_objects(
        path, Path(path).read_text(encoding="utf-8").splitlines()
    ):
        text = raw.get("task") or raw.get("question") or raw.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("needs a `task` (or `question`/`prompt`) string", where=where)
        answer = raw.get("answer", raw.get("expected"))
        verifier = raw.get("verifier")
        tasks.append(
            EvalTask(
                id=str(raw.get("id", number)),
                task=text,
                answer=None if answer is None else str(answer),
                verifier=None if verifier is None else str(verifier),
            )
        )
    if not tasks:
        raise ConfigError("no tasks", where=str(path))
    return tasks


# -- verifiers ----------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def normalize(text: str) -> str:
    """Case-folded, whitespace collapsed, surrounding quotes, trailing
    punctuation and a leading "the answer is" removed."""
    out = " ".join(text.split()).casefold()
    out = re.sub(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*", "", out)
    return out.strip().strip("\"'`").rstrip(".!").strip()


def exact(answer: str | None, task: EvalTask) -> bool:
    """Equal after ``normalize``."""
    return (
        answer is not None
        and task.answer is not None
        and normalize(answer) == normalize(task.answer)
    )


def _first_number(text: str) -> float | None:
    found = _NUMBER.search(text)
    if found is None:
        return None
    try:
        return float(found.group().replace(",", ""))
    except ValueError:
        return None


def numeric(rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Verifier:
    """The first number of the answer equals the expected, within tolerance."""

    def verify(answer: str | None, task: EvalTask) -> bool:
        if answer is None or task.answer is None:
            return False
        got, want = _first_number(answer), _first_number(task.answer)
        if got is None or want is None:
            return False
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)

    return verify


def regex(answer: str | None, task: EvalTask) -> bool:
    """The expected answer is a pattern found in the answer."""
    if answer is None or task.answer is None:
        return False
    return re.search(task.answer, answer) is not None


def build_verifier(spec: str) -> Verifier:
    """``exact``, ``numeric`` (or ``numeric:TOL``), ``regex`` or
    ``pkg.mod:fn`` (a callable ``(answer, task) -> bool``)."""
    name, _, arg = spec.partition(":")
    if name == "exact" and not arg:
        return exact
    if name == "regex" and not arg:
        return regex
    if name == "numeric":
        try:
            return numeric(float(arg)) if arg else numeric()
        except ValueError:
            raise ConfigError(f"bad tolerance {arg!r}", where=f"verifier {spec!r}") from None
    if arg:
        try:
            fn = getattr(importlib.import_module(name), arg)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load: {exc}", where=f"verifier {spec!r}") from None
        if not callable(fn):
            raise ConfigError("is not callable", where=f"verifier {spec!r}")
        return fn  # type: ignore[no-any-return]
    raise ConfigError(
        "unknown verifier; use exact, numeric[:TOL], regex or pkg.mod:fn",
        where=f"verifier {spec!r}",
    )


__all__ = [
    "EvalTask",
    "Verifier",
    "build_verifier",
    "exact",
    "load_tasks",
    "normalize",
    "numeric",
    "regex",
]
