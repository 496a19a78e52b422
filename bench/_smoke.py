"""What the benchmarks print the same way: a table of rows (first column
left-aligned, the others right-aligned) and the verdict of a ``--smoke`` run
(one line per check, a count, and the exit status)."""

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


def mark(ok: bool | None) -> str:
    """A row's result cell: ``PASS``, ``MISS``, or empty for a row with no target."""
    return "" if ok is None else ("PASS" if ok else "MISS")


def print_table(title: str, headers: Sequence[str], cells: Sequence[Sequence[str]]) -> None:
    """Print ``title``, the ``headers``, a rule and the ``cells``, in columns
    as wide as their widest cell."""
    widths = [max(len(c[i]) for c in [headers, *cells]) for i in range(len(headers))]

    def line(cell: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cell, widths, strict=True))
        )

    print(title)
    print(line(headers))
    print("-" * len(line(headers)))
    for cell in cells:
        print(line(cell))
