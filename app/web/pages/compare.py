"""The compare pages: two runs (pick them, then their deltas with intervals,
the cases that flipped, the confusion difference), and two trajectories of
one case call by call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.core.reports.cooperation import CompareGap, compare_gap
from app.core.reports.stats import newcombe_interval
from app.core.score.families import BLOCKING_KEYS
from app.store import compare as comparing
from app.store import queries
from app.store.views import (
    ComparisonPublic,
    McNemarPublic,
    RatioPublic,
    RunPublic,
    RunsPublic,
    TurnDelta,
    TurnFigures,
    UsageDelta,
)
from app.web import figures
from app.web.deps import Id, OptionalId, ReadSession, SimulatorShare, render
from app.web.figures import Figure
from app.web.pages.run import TURN_COLUMNS
from app.web.templating import ms, signed, tokens, usd

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
    return UsageRow(
        d.label,
        shown(d.a),
        shown(d.b),
        delta,
        "n/a" if rel is None else f"{100 * rel:+.1f}%",
        "" if rel is None else "bad" if rel >= 0.005 else "ok" if rel <= -0.005 else "",
    )


@dataclass(frozen=True)
class PassSide:
    """One run's pass rate, and pass^k at the most trials of a case (k 0: one trial per case)."""

    ratio: RatioPublic
    k: int
    hat_k: float
    profiled: bool = False  # a run with simulated-user profiles: the cooperative user's conversations


def pass_side(run: RunPublic) -> PassSide:
    k = run.max_trials if run.max_trials > 1 else 0
    return PassSide(
        RatioPublic(num=run.passed, den=run.scored),
        k,
        run.pass_hat_k.get(str(k), 0.0) if k else 0.0,
        run.cooperative_only,
    )


@dataclass(frozen=True)
class PassHead:
    """What the compare page opens with: both pass rates, B − A in points (with its 95% interval),
    and what exact McNemar on the shared trajectories says of it."""

    a: PassSide
    b: PassSide
    delta: str  # "+12.5 pts", "n/a" without a trajectory on one side
    delta_ci: str  # "−3.1 pts to +27.9 pts" or ""
    verdict: str
    tone: str  # "ok": B better and unlikely noise; "bad": B worse and unlikely noise; "muted": otherwise


def mcnemar_verdict(m: McNemarPublic | None, shared: int) -> tuple[str, str]:
    """The McNemar line in words, and its tone."""
    if m is None or not shared:
        return "no shared cases: McNemar needs the same cases (and trials) in both runs", "muted"
    only = f"of {shared} shared trajectories, {m.passed_only_a} passed only in A and {m.passed_only_b} only in B"
    if not m.passed_only_a and not m.passed_only_b:
        return f"no shared trajectory flipped ({shared} shared): no difference to test", "muted"
    p = f"exact McNemar p = {m.p_value:.3g}"
    if m.p_value < 0.05:
        better = m.passed_only_b > m.passed_only_a
        return (
            f"B {'passes more' if better else 'fails more'}, unlikely to be noise: {only} ({p})",
            "ok" if better else "bad",
        )
    return f"could be noise: {only} ({p})", "muted"


def pass_head(c: ComparisonPublic) -> PassHead:
    a, b = pass_side(c.a), pass_side(c.b)
    ra, rb = a.ratio, b.ratio
    delta = None if not ra.den or not rb.den else rb.num / rb.den - ra.num / ra.den
    interval = newcombe_interval(ra.num, ra.den, rb.num, rb.den)
    verdict, tone = mcnemar_verdict(c.mcnemar, c.shared_cases)
    if c.simulator_note:  # the simulated user explains too much of the difference: no better, no worse
        verdict, tone = f"no verdict: {c.simulator_note}", "muted"
    return PassHead(
        a,
        b,
        signed(delta),
        "" if interval is None else f"{signed(interval[0])} to {signed(interval[1])}",
        verdict,
        tone,
    )


@dataclass(frozen=True)
class TurnPair:
    """A row of the by-turn table: the turn in both runs, and its families in the columns (A's, B's)."""

    d: TurnDelta
    cells: list[tuple[RatioPublic | None, RatioPublic | None]]


def _family(t: TurnFigures | None, key: str) -> RatioPublic | None:
    return t.families.get(key) if t is not None else None


@dataclass
class ComparePage:
    c: ComparisonPublic
    difference: Figure
    blocking: set[str]  # zero-threshold families above zero in B: blocking, whatever the interval says
    usage: list[UsageRow]  # tokens, cost and latency, B against A
    passes: PassHead | None = None  # the pass rates, first on the page
    cooperation: CompareGap | None = None  # pass^k by simulated-user profile, B against A
    turn_columns: tuple[tuple[str, str], ...] = TURN_COLUMNS

    @property
    def turn_rows(self) -> list[TurnPair]:
        """The by-turn table's rows, a cell pair per column of ``turn_columns``."""
        return [TurnPair(d, [(_family(d.a, k), _family(d.b, k)) for k, _ in self.turn_columns]) for d in self.c.turns]


def compare_page(session: Session, a: int, b: int, cache: Any = None, share: float | None = None) -> ComparePage:
    c = cache.get(session, a, b) if cache is not None else comparing.compare_runs(session, a, b)
    c = comparing.with_simulator_share(c, share)
    return ComparePage(
        c=c,
        difference=figures.confusion_difference(c.confusion_diff),
        blocking={d.family for d in c.families if d.family in BLOCKING_KEYS and d.b.num},
        usage=[usage_row(d) for d in c.usage],
        passes=pass_head(c),
        cooperation=compare_gap(c.cooperation),
    )


@dataclass
class PickPage:
    """The header's Compare link: two runs to choose."""

    runs: RunsPublic
    a: int | None
    b: int | None


@router.get("/compare", response_class=HTMLResponse)
def compare(
    request: Request,
    session: ReadSession,
    a: OptionalId = None,
    b: OptionalId = None,
    simulator_share: SimulatorShare = None,
) -> HTMLResponse:
    if a is None or b is None:
        return render(request, "compare_pick.html", page=PickPage(queries.list_runs(session, limit=500), a, b))
    page = compare_page(session, a, b, request.app.state.comparisons, simulator_share)
    return render(request, "compare.html", page=page)


@router.get("/compare/trajectories", response_class=HTMLResponse)
def compare_trajectories(request: Request, a: Id, b: Id, session: ReadSession) -> HTMLResponse:
    return render(request, "pair.html", pair=comparing.compare_trajectories(session, a, b))
