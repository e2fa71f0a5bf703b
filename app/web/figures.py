"""Figures: Plotly figures as plain dicts, built from plain lists, and the
confusion heatmap as an HTML table (no Plotly: it is the run page's first
figure, and Plotly's 4.8 MB script takes seconds to start on a slow machine).

They reach the page through ``|tojson`` inside a ``<script
type="application/json">`` block; labels that come from suites or traces are
HTML-escaped first, because Plotly renders a subset of HTML in labels.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from app.store.views import ConfusionDelta, ConfusionPublic

MISSING, EXTRA = "(missing)", "(extra)"

Figure = dict[str, Any]  # a Plotly figure ({"data", "layout"}), for the page's ``|tojson``


def label(text: str) -> str:
    return html.escape(text, quote=False)


@dataclass
class HeatCell:
    count: int
    share: float  # of the row
    tone: str  # "agree-N" on the diagonal, "err-N" elsewhere, N = 0..4 by share; "" when empty
    href: str  # the run page filtered to exactly these trajectories


@dataclass
class HeatRow:
    expected: str
    cells: list[HeatCell]


@dataclass
class Heatmap:
    """The confusion matrix as an HTML table: agreement (the diagonal) in
    greens, errors in reds, so the eye goes to the confusions; every count
    printed, every cell a link."""

    called: list[tuple[str, str]]  # (tool, kind): kind is "", "hallucinated", "missing"
    rows: list[HeatRow]


ERR_STEPS = (0.05, 0.15, 0.3, 0.5)  # an error of a fifth of a row is already a dark cell


def _err_step(share: float) -> int:
    return sum(share >= s for s in ERR_STEPS)


def confusion_heatmap(m: ConfusionPublic) -> Heatmap:
    """Expected tools as rows, called tools as columns, the tone of a cell
    its row-normalised share in five steps (errors darken sooner)."""
    counts = {(c.expected, c.called): c.count for c in m.cells}
    hallucinated = {c.called for c in m.cells if c.hallucinated}
    rows = []
    for e in m.expected:
        total = sum(counts.get((e, c), 0) for c in m.called)
        cells = []
        for c in m.called:
            n = counts.get((e, c), 0)
            share = n / total if total else 0.0
            tone = "" if not n else f"agree-{min(int(share * 5), 4)}" if e == c else f"err-{_err_step(share)}"
            cells.append(HeatCell(n, share, tone, "?" + urlencode({"expected": e, "called": c}) + "#trajectories"))
        rows.append(HeatRow(e, cells))
    kinds = [(c, "hallucinated" if c in hallucinated else "missing" if c == MISSING else "") for c in m.called]
    return Heatmap(kinds, rows)


def confusion_difference(cells: Sequence[ConfusionDelta]) -> Figure:
    """A diverging heatmap of B minus A (red: more calls in B, blue: fewer),
    the signed count written in each cell."""
    rows = sorted({c.expected for c in cells} - {EXTRA}) + ([EXTRA] if any(c.expected == EXTRA for c in cells) else [])
    cols = sorted({c.called for c in cells} - {MISSING}) + (
        [MISSING] if any(c.called == MISSING for c in cells) else []
    )
    delta = {(c.expected, c.called): c for c in cells}
    z = [[delta[(e, c)].delta if (e, c) in delta and delta[(e, c)].delta else None for c in cols] for e in rows]
    custom = [[[delta[(e, c)].a, delta[(e, c)].b] if (e, c) in delta else [0, 0] for c in cols] for e in rows]
    bound = max((abs(v) for row in z for v in row if v), default=1)
    return _matrix(
        rows,
        {
            "z": z,
            "x": [label(c) for c in cols],
            "customdata": custom,
            "zmin": -bound,
            "zmax": bound,
            "colorscale": [[0, "#2166ac"], [0.5, "#f7f7f7"], [1, "#b2182b"]],
            "text": [[f"{v:+d}" if v else "" for v in row] for row in z],
            "hovertemplate": "expected %{y}<br>called %{x}<br>A %{customdata[0]} → B %{customdata[1]}<extra></extra>",
            "colorbar": {"title": {"text": "B − A calls"}},
        },
    )


def _matrix(rows: Sequence[str], trace: dict[str, Any]) -> Figure:
    """An expected (rows) × called (columns) heatmap with the axes every tool matrix shares."""
    return {
        "data": [
            {"type": "heatmap", "y": [label(e) for e in rows], "texttemplate": "%{text}", "xgap": 2, "ygap": 2, **trace}
        ],
        "layout": {
            "xaxis": {"title": {"text": "called"}, "side": "top", "tickangle": -30, "automargin": True},
            "yaxis": {"title": {"text": "expected"}, "autorange": "reversed", "automargin": True},
            "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
            "height": 120 + 34 * max(len(rows), 3),
        },
    }


OUTCOME_COLOURS = {"recovered": "#2e7d32", "gave_up": "#1565c0", "hallucinated": "#c62828", "confused": "#ef6c00"}


def outcome_bars(groups: Sequence[dict[str, Any]], key: str, title: str) -> Figure:
    """Stacked bars of outcomes per fault kind (or per step)."""
    xs = sorted({str(g[key]) for g in groups}, key=lambda v: (len(v), v))
    data = []
    for outcome, colour in OUTCOME_COLOURS.items():
        ys = [sum(g["count"] for g in groups if str(g[key]) == x and g["outcome"] == outcome) for x in xs]
        data.append({"type": "bar", "name": outcome, "x": [label(x) for x in xs], "y": ys, "marker": {"color": colour}})
    return {
        "data": data,
        "layout": {
            "barmode": "stack",
            "height": 260,
            "title": {"text": title},
            "margin": {"l": 40, "r": 10, "t": 40, "b": 40},
            "legend": {"orientation": "h"},
        },
    }
