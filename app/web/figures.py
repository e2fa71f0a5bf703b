"""Plotly figures as plain dicts, built from plain lists.

They reach the page through ``|tojson`` inside a ``<script
type="application/json">`` block; labels that come from suites or traces are
HTML-escaped first, because Plotly renders a subset of HTML in labels.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from app.store.views import ConfusionDelta, ConfusionPublic

MISSING, EXTRA = "(missing)", "(extra)"


def label(text: str) -> str:
    return html.escape(text, quote=False)


def confusion_heatmap(m: ConfusionPublic) -> dict[str, Any]:
    """Expected tools as rows, called tools as columns; the colour is the
    row-normalised share, the hover shows the count and the share."""
    rows, cols = m.expected, m.called
    counts = {(c.expected, c.called): c.count for c in m.cells}
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    custom: list[list[list[Any]]] = []
    for e in rows:
        total = sum(counts.get((e, c), 0) for c in cols)
        z_row: list[float | None] = []
        t_row: list[str] = []
        c_row: list[list[Any]] = []
        for c in cols:
            n = counts.get((e, c), 0)
            share = n / total if total else 0.0
            z_row.append(share if n else None)
            t_row.append(str(n) if n else "")
            c_row.append([n, round(share * 100, 1), e, c])
        z.append(z_row)
        text.append(t_row)
        custom.append(c_row)
    hallucinated = {c.called for c in m.cells if c.hallucinated}
    x = [label(c) + (" ⚠" if c in hallucinated else "") for c in cols]
    return _matrix(rows, {
        "z": z, "x": x, "text": text, "customdata": custom, "zmin": 0, "zmax": 1,
        "colorscale": [[0, "#e8f0fe"], [1, "#1a4fb4"]],
        "hovertemplate": "expected %{y}<br>called %{x}<br>%{customdata[0]} calls (%{customdata[1]}% of the row)"
                         "<extra></extra>",
        "colorbar": {"title": {"text": "share of row"}},
    })


def confusion_difference(cells: Sequence[ConfusionDelta]) -> dict[str, Any]:
    """A diverging heatmap of B minus A (red: more calls in B, blue: fewer),
    the signed count written in each cell."""
    rows = sorted({c.expected for c in cells} - {EXTRA}) + ([EXTRA] if any(c.expected == EXTRA for c in cells) else [])
    cols = sorted({c.called for c in cells} - {MISSING}) + ([MISSING] if any(c.called == MISSING for c in cells)
                                                            else [])
    delta = {(c.expected, c.called): c for c in cells}
    z = [[delta[(e, c)].delta if (e, c) in delta and delta[(e, c)].delta else None for c in cols] for e in rows]
    custom = [[[delta[(e, c)].a, delta[(e, c)].b] if (e, c) in delta else [0, 0] for c in cols] for e in rows]
    bound = max((abs(v) for row in z for v in row if v), default=1)
    return _matrix(rows, {
        "z": z, "x": [label(c) for c in cols], "customdata": custom, "zmin": -bound, "zmax": bound,
        "colorscale": [[0, "#2166ac"], [0.5, "#f7f7f7"], [1, "#b2182b"]],
        "text": [[f"{v:+d}" if v else "" for v in row] for row in z],
        "hovertemplate": "expected %{y}<br>called %{x}<br>A %{customdata[0]} → B %{customdata[1]}<extra></extra>",
        "colorbar": {"title": {"text": "B − A calls"}},
    })


def _matrix(rows: Sequence[str], trace: dict[str, Any]) -> dict[str, Any]:
    """An expected (rows) × called (columns) heatmap with the axes every tool matrix shares."""
    return {
        "data": [{"type": "heatmap", "y": [label(e) for e in rows], "texttemplate": "%{text}", "xgap": 2, "ygap": 2,
                  **trace}],
        "layout": {
            "xaxis": {"title": {"text": "called"}, "side": "top", "tickangle": -30, "automargin": True},
            "yaxis": {"title": {"text": "expected"}, "autorange": "reversed", "automargin": True},
            "margin": {"l": 10, "r": 10, "t": 10, "b": 10}, "height": 120 + 34 * max(len(rows), 3),
        },
    }


OUTCOME_COLOURS = {"recovered": "#2e7d32", "gave_up": "#1565c0", "hallucinated": "#c62828", "confused": "#ef6c00"}


def outcome_bars(groups: Sequence[dict[str, Any]], key: str, title: str) -> dict[str, Any]:
    """Stacked bars of outcomes per fault kind (or per step)."""
    xs = sorted({str(g[key]) for g in groups}, key=lambda v: (len(v), v))
    data = []
    for outcome, colour in OUTCOME_COLOURS.items():
        ys = [sum(g["count"] for g in groups if str(g[key]) == x and g["outcome"] == outcome) for x in xs]
        data.append({"type": "bar", "name": outcome, "x": [label(x) for x in xs], "y": ys,
                     "marker": {"color": colour}})
    return {"data": data, "layout": {"barmode": "stack", "height": 260, "title": {"text": title},
                                     "margin": {"l": 40, "r": 10, "t": 40, "b": 40}, "legend": {"orientation": "h"}}}
