"""SWE-bench in and out: ``SweInstance`` (one instance of a SWE-bench
JSONL or Parquet file, the datasets' column names), ``load_instances``
(instances as ``CodingTask``s, their repositories in a local directory of
clones), ``Prediction`` and ``write_predictions`` (the JSONL the official
``swebench`` harness reads: ``instance_id``, ``model_name_or_path``,
``model_patch``), ``harness_instance`` and ``write_harness_instances`` (the
instances with the fields the harness's ``make_test_spec`` needs: ``image``,
``eval_script``, ``log_parser``, ``eval_type``).

Must not know about aggregators or the command line.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from pydantic import ValidationError

from agentrt.runtime.evaluation._coding_task import CodingTask
from agentrt.runtime.evaluation._task_sets import jsonl_objects
from agentrt.runtime.evaluation._test_verifier import TestVerifierConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.sandbox._bwrap import SandboxEnvironment

__all__ = [
    "HARNESS_WORKDIR",
    "Prediction",
    "SweInstance",
    "harness_instance",
    "load_instances",
    "read_instance_rows",
    "repo_directory",
    "write_harness_instances",
    "write_predictions",
]

#: Where the ``swebench`` harness's images hold the repository.
HARNESS_WORKDIR: Final = "/testbed"
#: The harness's markers around the test output its log parsers read.
_START: Final = ">>>>> Start Test Output"
_END: Final = ">>>>> End Test Output"


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
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    image: str | None = None
    """The harness's image for the instance (datasets in ``swebench`` 5's
    format carry it, with ``eval_script``, ``log_parser`` and ``eval_type``)."""
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None


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


def read_instance_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The instances of a SWE-bench file as ``(where, row)``: JSONL (one
    object a line), or Parquet when ``path`` ends in ``.parquet`` (the
    published datasets' files; needs ``pyarrow``).  ``ConfigError`` naming
    the file (and the line or row) when it cannot be read."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                "Parquet needs pyarrow: pip install 'agentrt[parquet]' (or use .jsonl)",
                where=str(path),
            ) from None
        try:
            rows = pq.read_table(path).to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            raise ConfigError(f"cannot read Parquet: {exc}", where=str(path)) from None
        return [(f"{path}: row {number}", row) for number, row in enumerate(rows, 1)]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read it: {exc}", where=str(path)) from None
    return [(where, raw) for _, where, raw in jsonl_objects(path, lines)]


def load_instances(
    path: Path,
    *,
    repos: Path,
    test_command: str | None = None,
    test_settings: Mapping[str, Any] | None = None,
) -> list[tuple[SweInstance, CodingTask]]:
    """Read a SWE-bench file (``read_instance_rows``: JSONL or Parquet);
    each instance with its ``CodingTask``
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
    for where, raw in read_instance_rows(path):
        # Parquet has a null where a JSONL line has no key
        fields = {k: raw[k] for k in SweInstance.__struct_fields__ if raw.get(k) is not None}
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


def harness_instance(instance: SweInstance, *, test_command: str | None = None) -> dict[str, Any]:
    """``instance`` as the ``swebench`` harness's ``make_test_spec`` reads
    it: the dataset's columns (``FAIL_TO_PASS``/``PASS_TO_PASS`` as JSON
    strings) and ``image``, ``eval_script``, ``log_parser``, ``eval_type``.
    Those the instance has are kept; the others are made: the image's
    published name (``sweb.eval.x86_64.<id>:latest``), an eval script that
    in ``/testbed`` puts the test files back as ``base_commit`` has them,
    applies ``test_patch``, runs the instance's ``test_command`` (else
    ``test_command``) between the harness's markers and resets the test
    files, pytest's log parser, both lists graded.  ``ConfigError`` naming
    the instance when it has no eval script and no test command."""
    command = instance.test_command or test_command
    eval_script = instance.eval_script
    if eval_script is None:
        if not command:
            raise ConfigError(
                "no eval_script and no test command to make one from "
                "(give the instance a test_command, or --test-command)",
                where=f"instance {instance.instance_id!r}",
            )
        eval_script = _eval_script(instance, command)
    return {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "patch": instance.patch,
        "test_patch": instance.test_patch,
        "problem_statement": instance.problem_statement,
        "hints_text": instance.hints_text,
        "created_at": instance.created_at,
        "version": instance.version,
        "FAIL_TO_PASS": msgspec.json.encode(instance.FAIL_TO_PASS).decode(),
        "PASS_TO_PASS": msgspec.json.encode(instance.PASS_TO_PASS).decode(),
        "environment_setup_commit": instance.environment_setup_commit or instance.base_commit,
        "image": instance.image or f"sweb.eval.x86_64.{instance.instance_id}:latest".lower(),
        "eval_script": eval_script,
        "log_parser": instance.log_parser or "parse_log_pytest",
        "eval_type": instance.eval_type or "pass_and_fail",
    }


def _eval_script(instance: SweInstance, command: str) -> str:
    """The harness's eval script for ``instance`` (its shape: the harness
    strips the first two lines and finds the test exit code before the end
    marker)."""
    config = TestVerifierConfig(
        command=command,
        fail_to_pass=tuple(instance.FAIL_TO_PASS),
        pass_to_pass=tuple(instance.PASS_TO_PASS),
        test_patch=instance.test_patch,
    )
    base = shlex.quote(instance.base_commit)
    files = " ".join(shlex.quote(f) for f in config.test_files())
    reset = [f"git checkout {base} -- {files}"] if files else []
    lines = ["#!/bin/bash", "set -uxo pipefail", f"cd {HARNESS_WORKDIR}", *reset]
    if instance.test_patch.strip():
        marker = "EOF_AGENTRT_TEST_PATCH"
        lines += [f"git apply -v - <<'{marker}'", instance.test_patch.rstrip("\n"), marker]
    lines += [f": '{_START}'", config.command_line(), f": '{_END}'", *reset]
    return "\n".join(lines) + "\n"


def write_harness_instances(
    path: Path, instances: Sequence[SweInstance], *, test_command: str | None = None
) -> None:
    """Write ``harness_instance`` of each as JSONL: the file to give the
    harness as ``--dataset_name``."""
    rows = [harness_instance(i, test_command=test_command) for i in instances]
    Path(path).write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in rows))
