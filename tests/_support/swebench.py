"""SWE-bench instance lines, as tests write them to a ``.jsonl`` file."""

from __future__ import annotations

from typing import Any

BARE_INSTANCE: dict[str, Any] = {
    "instance_id": "o__r-1",
    "repo": "o/r",
    "base_commit": "abc",
    "problem_statement": "p",
    "FAIL_TO_PASS": '["t.py::test_a"]',
}
"""The fields every instance has (its one failing test named as the
dataset does, a JSON list in a string); a test adds the ones it is about."""
