"""Jinja2 set-up: where templates live, and the display filters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment
from starlette.requests import Request

from app.core.reports.wording import fault_key_text, fault_text, fraction

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"


def ratio(r: Any) -> str:
    """'85.5%' or 'n/a' for a {num, den} (never a bare ratio without it); 'no reference' for a
    figure that needs expected calls when no trajectory had any (``no_reference``)."""
    num, den = (r["num"], r["den"]) if isinstance(r, dict) else (r.num, r.den)
    unreferenced = r.get("no_reference") if isinstance(r, dict) else getattr(r, "no_reference", False)
    if not den and unreferenced:
        return "no reference"
    return "n/a" if not den else f"{100 * num / den:.1f}%"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def signed(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def usd(x: float | None) -> str:
    """'$0.0123' (four significant digits below a cent), or '—' without a price."""
    if x is None:
        return "—"
    return f"${x:,.2f}" if abs(x) >= 1 else f"${x:.4g}"


def ms(x: float | None) -> str:
    """'850 ms', '12.3 s', or '—' without a measurement."""
    if x is None:
        return "—"
    if x >= 10_000:
        return f"{x / 1000:.1f} s"
    return f"{x:.0f} ms" if x >= 10 else f"{x:.2g} ms"


def tokens(n: float | None) -> str:
    return "—" if n is None else f"{n:,.0f}"


def pretty_json(value: Any) -> str:
    """JSON for people (autoescaped by the template, unlike ``|tojson``,
    which is for scripts and shows quotes as \\u0027)."""
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def short_json(value: Any, width: int = 80) -> str:
    """JSON on one line when it fits in ``width`` characters, else ``pretty_json``
    (a timeline's small arguments take one line, not three)."""
    flat = json.dumps(value, ensure_ascii=False, default=str)
    return flat if len(flat) <= width else pretty_json(value)


def fault_label(key: str | None) -> str:
    """A stored fault key ("0:http_503", the step counted from 0) as people
    read it: "http_503 at call #1"."""
    return fault_key_text(key)


def fault_words(fault: Any) -> str:
    """A fault object (``{"kind", "step"}``) as ``fault_label`` reads a key: "http_503 at call #1"."""
    if fault is None:
        return "—"
    if isinstance(fault, dict):
        return fault_text(fault.get("kind"), fault.get("step"))
    return fault_text(getattr(fault, "kind", None), getattr(fault, "step", None))


FOLD_LINES = 3
FOLD_CHARS = 240


def fold_head(text: str, lines: int = FOLD_LINES, chars: int = FOLD_CHARS) -> str:
    """The first few lines of a long text (the whole text when it is short):
    a long observation shows this much, the rest behind a <details>."""
    head = "\n".join(text.split("\n", lines)[:lines])
    if len(head) > chars:
        head = head[:chars]
    return head if len(head) == len(text) else head.rstrip() + " …"


def install_filters(env: Environment) -> None:
    env.filters["fold_head"] = fold_head
    env.filters["fault_label"] = fault_label
    env.filters["fault_words"] = fault_words
    env.filters["fraction"] = lambda r: fraction(*((r["num"], r["den"]) if isinstance(r, dict) else (r.num, r.den)))
    env.filters["pretty_json"] = pretty_json
    env.filters["short_json"] = short_json
    env.filters["ratio"] = ratio
    env.filters["pct"] = pct
    env.filters["signed"] = signed
    env.filters["usd"] = usd
    env.filters["ms"] = ms
    env.filters["tokens"] = tokens


def page_globals(request: Request) -> dict[str, Any]:
    """``root`` (the prefix every link starts with: the app's root path, so
    pages work behind a proxy under a prefix and under any host) and
    ``static(name)``, a static file's versioned URL."""
    from app.web.assets import static_url

    root = str(request.scope.get("root_path", "")).rstrip("/")
    return {"root": root, "static": lambda name: static_url(root, name)}
