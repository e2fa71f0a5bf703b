"""The compare pages: two runs (pick them, then their deltas with intervals,
the cases that flipped, the confusion difference), and two trajectories of
one case call by call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.core.families import BLOCKING_KEYS
from app.store import compare as comparing
from app.store import queries
from app.store.views import ComparisonPublic, RunsPublic, UsageDelta
from app.web import figures
from app.web.deps import Id, OptionalId, ReadSession, render
from app.web.figures import Figure
from app.web.pages.run import TURN_COLUMNS
from app.web.templating import ms, tokens, usd

router = APIRouter()


@dataclass(frozen=True)
class UsageRow:
    """A usage figure of A and B, and how B differs, in words; ``tone`` says whether B costs more ("bad")."""

    label: str
    a: str
    b: str
    delta: str
    change: str
    tone: str


def usage_row(d: UsageDelta) -> UsageRow:
    shown = usd if d.unit == "usd" else ms if d.unit == "ms" else tokens
    if d.delta is None:
        delta = "n/a"
    elif d.unit in ("usd", "ms"):
        delta = ("+" if d.delta >= 0 else "−") + shown(abs(d.delta))
    else:
        delta = f"{d.delta:+.0f}"
    rel = d.relative
    return UsageRow(d.label, shown(d.a), shown(d.b), delta, "n/a" if rel is None else f"{100 * rel:+.1f}%",
                    "" if rel is None else "bad" if rel >= 0.005 else "ok" if rel <= -0.005 else "")


@dataclass
class ComparePage:
    c: ComparisonPublic
    difference: Figure
    blocking: set[str]  # zero-threshold families above zero in B: blocking, whatever the interval says
    usage: list[UsageRow]  # tokens, cost and latency, B against A
    turn_columns: tuple[tuple[str, str], ...] = TURN_COLUMNS


def compare_page(session: Session, a: int, b: int, cache: Any = None) -> ComparePage:
    c = cache.get(session, a, b) if cache is not None else comparing.compare_runs(session, a, b)
    return ComparePage(c=c, difference=figures.confusion_difference(c.confusion_diff),
                       blocking={d.family for d in c.families if d.family in BLOCKING_KEYS and d.b.num},
                       usage=[usage_row(d) for d in c.usage])


@dataclass
class PickPage:
    """The header's Compare link: two runs to choose."""

    runs: RunsPublic
    a: int | None
    b: int | None


@router.get("/compare", response_class=HTMLResponse)
def compare(request: Request, session: ReadSession, a: OptionalId = None, b: OptionalId = None) -> HTMLResponse:
    if a is None or b is None:
        return render(request, "compare_pick.html", page=PickPage(queries.list_runs(session, limit=500), a, b))
    return render(request, "compare.html", page=compare_page(session, a, b, request.app.state.comparisons))


@router.get("/compare/trajectories", response_class=HTMLResponse)
def compare_trajectories(request: Request, a: Id, b: Id, session: ReadSession) -> HTMLResponse:
    return render(request, "pair.html", pair=comparing.compare_trajectories(session, a, b))
