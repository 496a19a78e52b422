"""The verdict of a benchmark's ``--smoke`` run, the same for every benchmark:
one line per check, a count, and the exit status."""

from __future__ import annotations

from collections.abc import Sequence


def verdict(checks: Sequence[tuple[str, str, bool]], label_width: int, value_width: int) -> int:
    """Print each ``(label, value, ok)`` check in columns of ``label_width``
    and ``value_width``, then how many passed; 1 when any failed, else 0."""
    for label, value, ok in checks:
        print(f"  {label:<{label_width}} {value:>{value_width}}  {'ok' if ok else 'FAILED'}")
    failed = sum(not ok for *_, ok in checks)
    print(f"smoke: {len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0
