"""Build a small real SWE-bench-style task set from PyPI sdists.

Fetches pinned sdists of small pure-Python projects from PyPI (checked
against their sha256, cached), makes each a git repository ("upstream"),
then for each task commits a known bug on top of it: that commit is the
task's base_commit, the reverse diff its gold ``patch``, and the project's
own tests that the bug breaks its FAIL_TO_PASS.  Writes
``CACHE/instances.jsonl`` (SWE-bench format plus agentrt's
``test_command``), the clones under ``CACHE/repos/pypi__<project>`` and
pytest for the tests under ``CACHE/pytest`` (mount it with ``--test-path``).

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
from dataclasses import dataclass
from pathlib import Path

PYTEST = "pytest==8.3.5"


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
    problem: str


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
        ("test_six.py::EnsureTests::test_ensure_str",),
        "On Python 3, six.ensure_str(b'abc') returns \"b'abc'\" instead of decoding the "
        "bytes to 'abc'.",
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


def add_bug(bug: Bug, repo: Path, upstream: str) -> tuple[str, str]:
    """Commit ``bug`` on top of upstream (tag ``task/<id>``); its sha and the fix."""
    tag = f"task/{bug.id}"
    if not git("tag", "--list", tag, cwd=repo):
        git("checkout", "-q", "--detach", upstream, cwd=repo)
        path = repo / bug.file
        text = path.read_text()
        if text.count(bug.old) != 1:
            raise SystemExit(f"{bug.id}: the text to change occurs {text.count(bug.old)} times")
        path.write_text(text.replace(bug.old, bug.new))
        git("commit", "-q", "-am", f"{bug.id}: introduce the bug", cwd=repo)
        git("tag", tag, cwd=repo)
        git("checkout", "-q", "main", cwd=repo)
    base = git("rev-parse", f"{tag}^{{commit}}", cwd=repo)
    fix = git("diff", "--no-color", "--no-renames", base, upstream, cwd=repo, strip=False)
    return base, fix


def install_pytest(cache: Path) -> Path:
    target = cache / "pytest"
    if not (target / "pytest").is_dir():
        subprocess.run(  # noqa: S603 (fixed argv)
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), PYTEST],
            check=True,
        )
    return target


def build(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o755)  # noqa: S103 (the sandbox's user reads the snapshots and pytest)
    pytest_dir = install_pytest(cache)
    lines = []
    for bug in BUGS:
        project = PROJECTS[bug.project]
        repo, upstream = make_repo(project, cache)
        base, fix = add_bug(bug, repo, upstream)
        source = f"/workspace/{project.source}" if project.source else "/workspace"
        command = (
            f"PYTHONPATH={source}:{pytest_dir} python3 -m pytest -q -x -p no:cacheprovider "
            "{tests}"
        )
        lines.append(
            {
                "instance_id": bug.id,
                "repo": f"pypi/{project.name}",
                "base_commit": base,
                "problem_statement": bug.problem,
                "FAIL_TO_PASS": json.dumps(list(bug.tests)),
                "PASS_TO_PASS": "[]",
                "patch": fix,
                "test_patch": "",
                "version": project.version,
                "environment_setup_commit": base,
                "created_at": "2026-01-01T00:00:00Z",
                "hints_text": "",
                "test_command": command,
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
    print(f"pytest for the tests (--test-path): {args.cache.resolve() / 'pytest'}")


if __name__ == "__main__":
    main()
