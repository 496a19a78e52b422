"""SWE-bench in and out: ``SweInstance`` (one line of a SWE-bench-format
JSONL file), ``load_instances`` (instances as ``CodingTask``s, their
repositories in a local directory of clones), ``Prediction`` and
``write_predictions`` (the JSONL the official ``swebench`` harness reads:
``instance_id``, ``model_name_or_path``, ``model_patch``).

Must not know about aggregators or the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from pydantic import ValidationError

from agentrt.runtime.evaluation._coding_task import CodingTask
from agentrt.runtime.evaluation._task_sets import jsonl_objects
from agentrt.runtime.evaluation._test_verifier import TestVerifierConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.sandbox._bwrap import SandboxEnvironment

__all__ = [
    "Prediction",
    "SweInstance",
    "load_instances",
    "repo_directory",
    "write_predictions",
]


class SweInstance(msgspec.Struct, frozen=True, kw_only=True):
    """A SWE-bench task instance (the fields agentrt reads; others are kept
    by the file, not here).  ``FAIL_TO_PASS``/``PASS_TO_PASS`` are lists of
    test ids, or JSON strings of them as the published datasets have.
    ``test_command`` (agentrt's extension) runs the tests here; ``{tests}``
    in it becomes the quoted test ids, and it prints pytest's ``-rA``
    summary (``python -m pytest -rA {tests}``)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    FAIL_TO_PASS: list[str] = []
    PASS_TO_PASS: list[str] = []
    patch: str = ""
    test_patch: str = ""
    test_command: str | None = None
    environment: SandboxEnvironment | None = None
    """agentrt's extension: the repository's prepared environment (a
    virtualenv built at setup), for the agent's tools and the tests."""


class Prediction(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a predictions file for the ``swebench`` harness."""

    instance_id: str
    model_name_or_path: str
    model_patch: str


def _test_ids(raw: Any, key: str, where: str) -> list[str]:
    if isinstance(raw, str):
        try:
            raw = msgspec.json.decode(raw) if raw.strip() else []
        except msgspec.DecodeError:
            raise ConfigError(f"{key} is not a JSON list of test ids", where=where) from None
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise ConfigError(f"{key} must be a list of test ids", where=where)
    return raw


def repo_directory(repos: Path, repo: str) -> Path:
    """Where ``repo`` (``owner/name``) is cloned under ``repos``:
    ``owner__name`` (SWE-bench's naming) when it exists, else ``name``."""
    owner_name = repos / repo.replace("/", "__")
    if owner_name.exists():
        return owner_name
    short = repos / repo.rsplit("/", 1)[-1]
    return short if short.exists() else owner_name


def load_instances(
    path: Path,
    *,
    repos: Path,
    test_command: str | None = None,
    test_settings: Mapping[str, Any] | None = None,
) -> list[tuple[SweInstance, CodingTask]]:
    """Read a SWE-bench JSONL file; each instance with its ``CodingTask``
    (its repository under ``repos``, see ``repo_directory``).  Its tests run
    with the instance's ``test_command``, else ``test_command`` (``{tests}``:
    FAIL_TO_PASS and PASS_TO_PASS, quoted), with ``test_settings``
    (``TestVerifierConfig`` fields: ``timeout_s``, ``read_only_paths``,
    ``env``..., added to the instance's ``environment``); no command: no
    verifier.  Its tests are graded on a fresh checkout: the answer, the
    instance's test files reset, its ``test_patch``, FAIL_TO_PASS and
    PASS_TO_PASS each passing.  A missing repository is not an
    error here (its rollouts record it).  ``ConfigError`` naming the file
    and line for a malformed line or a duplicate ``instance_id``."""
    out: list[tuple[SweInstance, CodingTask]] = []
    seen: set[str] = set()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc}", where=str(path)) from None
    for _, where, raw in jsonl_objects(path, lines):
        fields = {k: raw[k] for k in SweInstance.__struct_fields__ if k in raw}
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if key in fields:
                fields[key] = _test_ids(fields[key], key, where)
        try:
            instance = msgspec.convert(fields, SweInstance)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"not a SWE-bench instance: {exc}", where=where) from None
        if instance.instance_id in seen:
            raise ConfigError(f"instance_id {instance.instance_id!r} appears twice", where=where)
        seen.add(instance.instance_id)
        command = instance.test_command or test_command
        environment = instance.environment or SandboxEnvironment()
        tests = None
        if command:
            settings = dict(test_settings or {})
            try:
                tests = TestVerifierConfig(
                    command=command,
                    fail_to_pass=tuple(instance.FAIL_TO_PASS),
                    pass_to_pass=tuple(instance.PASS_TO_PASS),
                    test_patch=instance.test_patch,
                    **{
                        **settings,
                        "read_only_paths": (
                            *environment.read_only_paths,
                            *settings.get("read_only_paths", ()),
                        ),
                        "env": {**environment.env, **settings.get("env", {})},
                    },
                )
            except ValidationError as exc:
                raise ConfigError(f"test settings: {exc}", where=where) from None
        task = CodingTask(
            id=instance.instance_id,
            problem=instance.problem_statement,
            repo=str(repo_directory(repos, instance.repo)),
            base_commit=instance.base_commit,
            tests=tests,
            environment=instance.environment,
        )
        out.append((instance, task))
    if not out:
        raise ConfigError("no instances", where=str(path))
    return out


def write_predictions(path: Path, predictions: Sequence[Prediction]) -> None:
    """Write ``predictions`` as JSONL (one object a line), or as a JSON list
    when ``path`` ends in ``.json``: both are what ``swebench`` reads."""
    if Path(path).suffix == ".json":
        Path(path).write_bytes(msgspec.json.encode(list(predictions)) + b"\n")
        return
    Path(path).write_bytes(b"".join(msgspec.json.encode(p) + b"\n" for p in predictions))
