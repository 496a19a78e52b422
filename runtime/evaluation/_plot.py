"""Accuracy-versus-tokens curves as a standalone SVG file (no plotting library).

Owns ``curves`` (per aggregator, one point per k: mean tokens per task,
rollouts and aggregation included, the accuracy and its interval) and ``render_svg`` /
``write_svg``: axes with ticks, one coloured polyline per strategy with
its points and interval whiskers, and a legend.  The SVG is plain XML,
readable by any browser.

Imports only ``agentrt.runtime.evaluation._eval`` (for the report types) and the stdlib.
"""

from __future__ import annotations

import math
from pathlib import Path
from xml.sax.saxutils import escape

from agentrt.runtime.evaluation._eval import EvalReport

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
_W, _H = 640, 420
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 160, 24, 52

Point = tuple[float, float, float, float]
"""(tokens per task, accuracy, low, high)."""


def curves(report: EvalReport) -> dict[str, list[Point]]:
    """Per aggregator, its points (one per k) sorted by tokens."""
    out: dict[str, list[Point]] = {}
    for c in report.aggregators:
        out[c.aggregate] = sorted(
            (p.tokens_per_task, p.accuracy.value, p.accuracy.low, p.accuracy.high) for p in c.points
        )
    return out


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= step * mult:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def render_svg(report: EvalReport, *, title: str = "accuracy vs tokens") -> str:
    """The plot as an SVG document."""
    data = curves(report)
    xs = [p[0] for points in data.values() for p in points] or [0.0]
    x_lo, x_hi = 0.0, max(xs) * 1.08 or 1.0
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return _TOP + (1.0 - y) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="white"/>',
        f'<line x1="{_LEFT}" y1="{py(0):.1f}" x2="{_LEFT + plot_w}" y2="{py(0):.1f}" '
        'stroke="black"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{py(0):.1f}" stroke="black"/>',
    ]
    for y in _ticks(0.0, 1.0):
        parts.append(
            f'<line x1="{_LEFT - 4}" y1="{py(y):.1f}" x2="{_LEFT + plot_w}" y2="{py(y):.1f}" '
            'stroke="#ddd"/>'
            f'<text x="{_LEFT - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>'
        )
    for x in _ticks(x_lo, x_hi):
        parts.append(
            f'<line x1="{px(x):.1f}" y1="{py(0):.1f}" x2="{px(x):.1f}" y2="{py(0) + 4:.1f}" '
            'stroke="black"/>'
            f'<text x="{px(x):.1f}" y="{py(0) + 16:.1f}" text-anchor="middle">{x:g}</text>'
        )
    parts.append(
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_H - 12}" text-anchor="middle">'
        "tokens per task (k rollouts + aggregation)</text>"
        f'<text x="16" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {_TOP + plot_h / 2:.1f})">accuracy</text>'
    )
    for i, (name, points) in enumerate(sorted(data.items())):
        colour = _COLOURS[i % len(_COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _, _ in points)
        parts.append(
            f'<g class="strategy" data-name="{escape(name)}">'
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        for x, y, lo, hi in points:
            parts.append(
                f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" '
                f'stroke="{colour}" stroke-opacity="0.5"/>'
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}"/>'
            )
        ly = _TOP + 14 + 18 * i
        lx = _W - _RIGHT + 16
        parts.append(
            f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{lx + 18}" y="{ly + 1}">{escape(name)}</text></g>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_svg(report: EvalReport, path: str | Path, *, title: str = "accuracy vs tokens") -> Path:
    """Write the plot to ``path``; returns it."""
    target = Path(path)
    target.write_text(render_svg(report, title=title), encoding="utf-8")
    return target


__all__ = ["curves", "render_svg", "write_svg"]
