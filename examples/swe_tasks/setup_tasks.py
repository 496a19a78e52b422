"""Build a small real SWE-bench-style task set from PyPI sdists.

Fetches pinned sdists of small pure-Python projects from PyPI (checked
against their sha256, cached), makes each a git repository ("upstream"),
then for each task commits a known bug on top of it: that commit is the
task's base_commit, the reverse diff its gold ``patch``, and the cases of
the project's own tests that the bug breaks its FAIL_TO_PASS (each node id
as pytest reports it, as the official harness matches them).  Writes
``CACHE/instances.jsonl`` (SWE-bench format plus agentrt's
``test_command`` and ``environment``), the clones under
``CACHE/repos/pypi__<project>``, pytest under ``CACHE/pytest`` and each
project's virtualenv under ``CACHE/envs/<project>`` (the environment the
agent's shell and the tests run in, shown read-only).

    .venv/bin/python examples/swe_tasks/setup_tasks.py --cache /tmp/agentrt-swe-tasks

Re-running reuses the cache. Needs git, and PyPI for the first run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

PYTEST = "pytest==8.3.5"
#: Every task's tests, in its environment (its virtualenv); -rA: each test's result.
TEST_COMMAND = "python -m pytest -q -rA -p no:cacheprovider {tests}"


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    sha256: str
    source: str = ""
    """The import root under the sdist (``src`` for a src layout)."""


@dataclass(frozen=True)
class Bug:
    id: str
    project: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    """The project's tests the bug breaks (FAIL_TO_PASS: their failing cases)."""
    problem: str
    keep: tuple[str, ...]
    """Tests near the bug that pass with and without it (PASS_TO_PASS: their cases)."""
    test_edit: tuple[str, str, str] | None = None
    """``(file, old, new)``: the task's ``test_patch`` (tests the fix needs)."""


PROJECTS = {
    p.name: p
    for p in (
        Project(
            "inflection",
            "0.5.1",
            "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ),
        Project(
            "cachetools",
            "5.3.3",
            "ba29e2dfa0b8b556606f097407ed1aa62080ee108ab0dc5ec9d6a723a007d105",
            source="src",
        ),
        Project(
            "more-itertools",
            "10.2.0",
            "8fccb480c43d3e99a00087634c06dd02b0d50fbf088b380de5a41a015ec239e1",
        ),
        Project(
            "toolz", "0.12.1", "ecca342664893f177a13dac0e6b41cbd8ac25a358e5f215316d43e2100224f4d"
        ),
        Project(
            "six", "1.16.0", "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926"
        ),
        Project(
            "boltons", "24.0.0", "7153feccaea1ff2e1472f68d4b57fadb796a2ee49d29f638f1c9cd8fb5ebd916"
        ),
    )
}

BUGS = (
    Bug(
        "inflection-ordinal-teens",
        "inflection",
        "inflection/__init__.py",
        "    if number % 100 in (11, 12, 13):",
        "    if number % 10 in (11, 12, 13):",
        ("test_inflection.py::test_ordinal", "test_inflection.py::test_ordinalize"),
        "inflection.ordinalize(11) returns '11st' and ordinalize(112) returns '112nd'; "
        "numbers ending in 11, 12 or 13 should take 'th' ('11th', '112th').",
        (
            "test_inflection.py::test_dasherize",
            "test_inflection.py::test_tableize",
            "test_inflection.py::test_camelize_with_underscores",
        ),
    ),
    Bug(
        "inflection-dasherize-all",
        "inflection",
        "inflection/__init__.py",
        "    return word.replace('_', '-')",
        "    return word.replace('_', '-', 1)",
        ("test_inflection.py::test_dasherize",),
        "inflection.dasherize('street_address_line') returns 'street-address_line': only "
        "the first underscore becomes a dash. Every underscore should.",
        (
            "test_inflection.py::test_ordinal",
            "test_inflection.py::test_underscore",
            "test_inflection.py::test_tableize",
        ),
    ),
    Bug(
        "cachetools-lru-evicts-newest",
        "cachetools",
        "src/cachetools/__init__.py",
        '        """Remove and return the `(key, value)` pair least recently used."""\n'
        "        try:\n            key = next(iter(self.__order))",
        '        """Remove and return the `(key, value)` pair least recently used."""\n'
        "        try:\n            key = next(reversed(self.__order))",
        ("tests/test_lru.py::LRUCacheTest::test_lru",),
        "cachetools.LRUCache evicts the most recently used item when it is full, not the "
        "least recently used one: after c[1]=1; c[2]=2; c[3]=3 with maxsize 2, key 3 is gone.",
        (
            "tests/test_lru.py::LRUCacheTest::test_lru_getsizeof",
            "tests/test_lru.py::LRUCacheTest::test_insert",
            "tests/test_lru.py::LRUCacheTest::test_delete",
        ),
    ),
    Bug(
        "cachetools-typedkey-first-arg",
        "cachetools",
        "src/cachetools/keys.py",
        "    key += tuple(type(v) for v in args)",
        "    key += tuple(type(v) for v in kwargs.values())",
        ("tests/test_keys.py::CacheKeysTest::test_typedkey",),
        "cachetools.keys.typedkey(1, 2) == typedkey(1.0, 2.0): the types of positional "
        "arguments are not part of the key, so cached(typed=True) mixes 1 and 1.0.",
        (
            "tests/test_keys.py::CacheKeysTest::test_hashkey",
            "tests/test_keys.py::CacheKeysTest::test_addkeys",
            "tests/test_keys.py::CacheKeysTest::test_pickle",
        ),
    ),
    Bug(
        "more-itertools-last-iterator",
        "more-itertools",
        "more_itertools/more.py",
        "            return deque(iterable, maxlen=1)[-1]",
        "            return deque(iterable, maxlen=2)[0]",
        ("tests/test_more.py::LastTests",),
        "more_itertools.last(iter([1, 2, 3])) returns 2: for an iterator (no __reversed__) "
        "it returns the second-to-last item instead of the last.",
        (
            "tests/test_more.py::FirstTests",
            "tests/test_more.py::ChunkedTests",
            "tests/test_more.py::AdjacentTests",
        ),
    ),
    Bug(
        "toolz-partition-all-tail",
        "toolz",
        "toolz/itertoolz.py",
        "            yield prev[:len(seq) % n]",
        "            yield prev[:len(seq) // n]",
        ("toolz/tests/test_itertoolz.py::test_partition_all",),
        "toolz.partition_all(2, [1, 2, 3, 4, 5]) ends with a wrong last chunk: for a "
        "sequence whose length is not a multiple of n the tail is cut at the wrong place.",
        (
            "toolz/tests/test_itertoolz.py::test_partition",
            "toolz/tests/test_itertoolz.py::test_interpose",
            "toolz/tests/test_itertoolz.py::test_sliding_window",
        ),
    ),
    Bug(
        "toolz-interpose-leading-sep",
        "toolz",
        "toolz/itertoolz.py",
        "    next(inposed)\n    return inposed",
        "    return inposed",
        ("toolz/tests/test_itertoolz.py::test_interpose",),
        "list(toolz.interpose('a', [1, 2, 3])) is ['a', 1, 'a', 2, 'a', 3]: it starts with "
        "the separator. It should be [1, 'a', 2, 'a', 3].",
        (
            "toolz/tests/test_itertoolz.py::test_partition_all",
            "toolz/tests/test_itertoolz.py::test_concat",
            "toolz/tests/test_itertoolz.py::test_frequencies",
        ),
    ),
    Bug(
        "six-ensure-str-bytes",
        "six",
        "six.py",
        "    elif PY3 and isinstance(s, binary_type):\n        return s.decode(encoding, errors)\n"
        "    elif not isinstance(s, (text_type, binary_type)):\n"
        "        raise TypeError(\"not expecting type '%s'\" % type(s))\n    return s\n\n\n"
        "def ensure_text",
        "    elif PY3 and isinstance(s, binary_type):\n        return str(s)\n"
        "    elif not isinstance(s, (text_type, binary_type)):\n"
        "        raise TypeError(\"not expecting type '%s'\" % type(s))\n    return s\n\n\n"
        "def ensure_text",
        ("test_six.py::TestEnsure::test_ensure_str",),
        "On Python 3, six.ensure_str(b'abc') returns \"b'abc'\" instead of decoding the "
        "bytes to 'abc'.",
        (
            "test_six.py::TestEnsure::test_ensure_text",
            "test_six.py::TestEnsure::test_ensure_binary_raise",
            "test_six.py::test_BytesIO",
        ),
        # six 1.16.0 names the class EnsureTests, which pytest does not collect
        # (python_classes is Test*): the test patch renames it so that it runs
        test_edit=("test_six.py", "class EnsureTests:", "class TestEnsure:"),
    ),
    Bug(
        "boltons-parse-int-list-range-end",
        "boltons",
        "boltons/strutils.py",
        "            output += list(range(min(range_limits), max(range_limits)+1))",
        "            output += list(range(min(range_limits), max(range_limits)))",
        ("tests/test_strutils.py::test_parse_int_list",),
        "boltons.strutils.parse_int_list('5-8') returns [5, 6, 7]: a range leaves out its "
        "last number. It should be [5, 6, 7, 8].",
        (
            "tests/test_strutils.py::test_format_int_list",
            "tests/test_strutils.py::test_asciify",
            "tests/test_strutils.py::TestMultiReplace::test_simple_substitutions",
        ),
    ),
    Bug(
        "boltons-format-int-list-after-range",
        "boltons",
        "boltons/strutils.py",
        "                contig_range.clear()\n                contig_range.append(x)\n",
        "                contig_range.clear()\n",
        ("tests/test_strutils.py::test_format_int_list",),
        "boltons.strutils.format_int_list([1, 3, 5, 6, 7, 8, 10, 11, 15]) returns "
        "'1,3,5-8,11,15': the number right after a range (10) is lost. It should be "
        "'1,3,5-8,10-11,15'.",
        (
            "tests/test_strutils.py::test_parse_int_list",
            "tests/test_strutils.py::test_indent",
            "tests/test_strutils.py::test_is_uuid",
        ),
    ),
)


def git(*args: str, cwd: Path, strip: bool = True) -> str:
    done = subprocess.run(  # noqa: S603 (fixed argv)
        ["git", "-c", "user.name=agentrt", "-c", "user.email=agentrt@localhost", *args],  # noqa: S607
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if strip else done.stdout


def fetch_sdist(project: Project, cache: Path) -> Path:
    """The sdist from PyPI (cached), checked against its pinned sha256."""
    target = cache / "sdists" / f"{project.name}-{project.version}.tar.gz"
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == project.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # pip (the ordinary client) fetches it from the configured index
    subprocess.run(  # noqa: S603 (fixed argv)
        [
            *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
            *("--no-binary", ":all:", "-d", str(target.parent)),
            f"{project.name}=={project.version}",
        ],
        check=True,
    )
    got = next(target.parent.glob(f"{project.name.replace('-', '[-_]')}-{project.version}.tar.gz"))
    digest = hashlib.sha256(got.read_bytes()).hexdigest()
    if digest != project.sha256:
        raise SystemExit(f"{project.name} {project.version}: sha256 {digest} != pinned")
    if got != target:
        got.rename(target)
    return target


def make_repo(project: Project, cache: Path) -> tuple[Path, str]:
    """``CACHE/repos/pypi__<name>`` with the sdist as its first commit; its sha."""
    repo = cache / "repos" / f"pypi__{project.name}"
    if (repo / ".git").is_dir():
        return repo, git("rev-parse", "upstream", cwd=repo)
    sdist = fetch_sdist(project, cache)
    staging = cache / "repos" / f".staging-{project.name}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(staging, filter="data")
    (top,) = staging.iterdir()
    git("init", "-q", "-b", "main", cwd=top)
    git("add", "-A", "-f", ".", cwd=top)
    git("commit", "-q", "-m", f"{project.name} {project.version} from its PyPI sdist", cwd=top)
    git("tag", "upstream", cwd=top)
    os.rename(top, repo)
    shutil.rmtree(staging)
    return repo, git("rev-parse", "upstream", cwd=repo)


def _commit_edit(repo: Path, start: str, tag: str, edit: tuple[str, str, str]) -> None:
    """Commit ``edit`` (file, old text, new text) on ``start`` as ``tag``, once."""
    if git("tag", "--list", tag, cwd=repo):
        return
    name, old, new = edit
    git("checkout", "-q", "--detach", start, cwd=repo)
    path = repo / name
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{tag}: the text to change occurs {text.count(old)} times")
    path.write_text(text.replace(old, new))
    git("commit", "-q", "-am", tag, cwd=repo)
    git("tag", tag, cwd=repo)
    git("checkout", "-q", "main", cwd=repo)


def add_bug(bug: Bug, repo: Path, upstream: str) -> tuple[str, str, str]:
    """Commit ``bug`` on top of upstream (tag ``task/<id>``), and its test
    edit on top of that (``task/<id>-tests``); its sha, the fix and the test patch."""
    tag = f"task/{bug.id}"
    _commit_edit(repo, upstream, tag, (bug.file, bug.old, bug.new))
    base = git("rev-parse", f"{tag}^{{commit}}", cwd=repo)
    fix = git("diff", "--no-color", "--no-renames", base, upstream, cwd=repo, strip=False)
    test_patch = ""
    if bug.test_edit is not None:
        _commit_edit(repo, base, f"{tag}-tests", bug.test_edit)
        test_patch = git("diff", "--no-color", base, f"{tag}-tests", cwd=repo, strip=False)
    return base, fix, test_patch


def _case_results(
    repo: Path, project: Project, *, commit: str, patch: str, ids: list[str], pytest_dir: Path
) -> dict[str, str]:
    """Each test case pytest reports (``-rA``) for ``ids`` at ``commit``
    with ``patch`` applied: its node id and ``PASSED``/``FAILED``/``ERROR``."""
    with tempfile.TemporaryDirectory() as checkout:
        git("clone", "-q", str(repo), checkout, cwd=repo)
        git("checkout", "-q", commit, cwd=Path(checkout))
        if patch:
            subprocess.run(  # noqa: S603 (fixed argv)
                ["git", "-C", checkout, "apply", "-"],  # noqa: S607
                input=patch,
                text=True,
                check=True,
            )
        done = subprocess.run(  # noqa: S603 (fixed argv)
            ["/usr/bin/python3", "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *ids],
            cwd=checkout,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": f"{Path(checkout, project.source)}:{pytest_dir}",
            },
            capture_output=True,
            text=True,
            check=False,
        )
    results: dict[str, str] = {}
    for line in done.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("PASSED", "FAILED", "ERROR") and rest:
            results[rest.split(" - ")[0].strip()] = status
    return results


def exact_ids(
    bug: Bug, project: Project, repo: Path, *, base: str, fix: str, test_patch: str, cache: Path
) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS as the node ids pytest reports (the
    official harness looks ids up verbatim): the cases under ``bug.tests``
    that fail at the base and pass with the fix, and the cases under either
    list that pass with and without it.  Run once per base commit (cached
    under ``CACHE/ids``); ``SystemExit`` when a named test has no such case."""
    stored = cache / "ids" / f"{bug.id}-{base}.json"
    if stored.is_file():
        f2p, p2p = json.loads(stored.read_text())
        return list(f2p), list(p2p)
    named = [*bug.tests, *bug.keep]
    pytest_dir = cache / "pytest"
    before = _case_results(
        repo, project, commit=base, patch=test_patch, ids=named, pytest_dir=pytest_dir
    )
    after = _case_results(
        repo, project, commit=base, patch=test_patch + fix, ids=named, pytest_dir=pytest_dir
    )

    def cases(test: str) -> list[str]:
        found = [n for n in after if n == test or n.startswith((f"{test}::", f"{test}["))]
        if not found or any(" " in n for n in found):
            raise SystemExit(f"{bug.id}: {test}: no case, or a case id with a space: {found}")
        return found

    f2p = [n for t in bug.tests for n in cases(t) if before.get(n) != "PASSED"]
    p2p = [n for t in named for n in cases(t) if before.get(n) == "PASSED"]
    if not f2p or any(after[n] != "PASSED" for n in (*f2p, *p2p)):
        raise SystemExit(f"{bug.id}: the fix does not make FAIL_TO_PASS pass: {after}")
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps([f2p, sorted(set(p2p), key=p2p.index)]))
    return f2p, sorted(set(p2p), key=p2p.index)


def install_pytest(cache: Path) -> Path:
    target = cache / "pytest"
    if not (target / "pytest").is_dir():
        subprocess.run(  # noqa: S603 (fixed argv)
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), PYTEST],
            check=True,
        )
    return target


def make_environment(project: Project, cache: Path, pytest_dir: Path) -> dict[str, object]:
    """The project's environment: a virtualenv of the sandbox's Python
    (``/usr/bin/python3``) under ``CACHE/envs/<name>`` that imports the
    project from the workspace and has pytest; what a sandbox needs to
    use it (the instance's ``environment``: read-only paths and variables)."""
    venv = cache / "envs" / project.name
    if not (venv / "agentrt-ready").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        # the system's Python: the sandbox shows /usr, not this interpreter's prefix
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
        site = subprocess.run(  # noqa: S603
            [str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        source = f"/workspace/{project.source}" if project.source else "/workspace"
        Path(site, "agentrt-task.pth").write_text(f"{source}\n{pytest_dir}\n")
        (venv / "agentrt-ready").write_text("")
    return {
        "read_only_paths": [str(venv), str(pytest_dir)],
        "env": {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv)},
    }


def build(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o755)  # noqa: S103 (the sandbox's user reads the snapshots and pytest)
    pytest_dir = install_pytest(cache)
    lines = []
    for bug in BUGS:
        project = PROJECTS[bug.project]
        repo, upstream = make_repo(project, cache)
        base, fix, test_patch = add_bug(bug, repo, upstream)
        fail_to_pass, pass_to_pass = exact_ids(
            bug, project, repo, base=base, fix=fix, test_patch=test_patch, cache=cache
        )
        lines.append(
            {
                "instance_id": bug.id,
                "repo": f"pypi/{project.name}",
                "base_commit": base,
                "problem_statement": bug.problem,
                "FAIL_TO_PASS": json.dumps(fail_to_pass),
                "PASS_TO_PASS": json.dumps(pass_to_pass),
                "patch": fix,
                "test_patch": test_patch,
                "version": project.version,
                "environment_setup_commit": base,
                "created_at": "2026-01-01T00:00:00Z",
                "hints_text": "",
                "test_command": TEST_COMMAND,
                "environment": make_environment(project, cache, pytest_dir),
            }
        )
    out = cache / "instances.jsonl"
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("/tmp/agentrt-swe-tasks"),  # noqa: S108 help="(default: %(default)s)"
    )
    args = parser.parse_args()
    out = build(args.cache.resolve())
    print(f"{len(BUGS)} tasks: {out}")
    print(f"repositories: {args.cache.resolve() / 'repos'}")
    print(f"environments (virtualenvs, shown read-only): {args.cache.resolve() / 'envs'}")


if __name__ == "__main__":
    main()
