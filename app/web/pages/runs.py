"""The home page: the runs, filtered, each with its families and what blocks it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.core.score.families import BY_KEY, FAMILIES, RATIO_FAMILIES
from app.store import queries
from app.store.views import RatioPublic, RunPublic
from app.web.deps import Limit, Offset, ReadSession, render
from app.web.pages.pager import Pager, pager

router = APIRouter()


def blocking(run: RunPublic) -> list[str]:
    """The names of the zero-threshold families that are not zero."""
    return [f.name for f in FAMILIES if f.blocking and run.families[f.key].num]


@dataclass(frozen=True)
class Column:
    """A family's column in a table of runs."""

    key: str
    title: str
    words: str


COLUMNS = [Column(f.key, f.title + (" (must be 0)" if f.blocking else ""), f.column) for f in RATIO_FAMILIES]
_F5 = BY_KEY["dependency_violations"]
ORDER_COLUMN = Column(_F5.key, f"{_F5.heading}: {_F5.name} of the order pairs checked", _F5.column)


@dataclass(frozen=True)
class Cell:
    """A ratio in the table, with the value its column sorts by (-1 without a denominator)."""

    ratio: RatioPublic
    sort: float


def cell(ratio: RatioPublic) -> Cell:
    return Cell(ratio, (ratio.num / ratio.den) if ratio.den else -1)


@dataclass(frozen=True)
class PassCell:
    """A run's pass rate (passed of the trajectories scored) and, with repeated trials, pass^k at the
    most trials a case had: the figures of the report (``pass_hat_k``), from the run's counters."""

    ratio: RatioPublic
    sort: float
    k: int = 0  # 0: one trial per case, no pass^k to show
    hat_k: float = 0.0
    profiled: bool = False  # a run with simulated-user profiles: the figures are the cooperative user's

    @property
    def hat_k_text(self) -> str:
        return f"{self.hat_k:.2f}"


def pass_cell(run: RunPublic) -> PassCell:
    ratio = RatioPublic(num=run.passed, den=run.scored)
    k = run.max_trials if run.max_trials > 1 else 0
    return PassCell(ratio, cell(ratio).sort, k, run.pass_hat_k.get(str(k), 0.0) if k else 0.0, run.cooperative_only)


@dataclass(frozen=True)
class RunRow:
    run: RunPublic
    blocking: list[str]
    families: list[Cell]  # in the order of RATIO_FAMILIES
    order: Cell  # F5: dependency violations of the order pairs checked
    passes: PassCell | None = None


@dataclass(frozen=True)
class RunsFilters:
    """The runs list's filters, as the form shows them ("": not set)."""

    suite: str = ""
    model: str = ""
    toolset_version: str = ""


@dataclass
class RunsPage:
    rows: list[RunRow]
    count: int
    filters: dict[str, str]
    pager: Pager | None
    columns: list[Column]  # of the families, as the cells of each row
    order_column: Column = ORDER_COLUMN  # F5's, after them

    @property
    def filter_view(self) -> RunsFilters:
        """The filters, typed."""
        return RunsFilters(**self.filters)


def runs_page(
    session: Session, *, suite: str | None, model: str | None, toolset_version: str | None, limit: int, offset: int
) -> RunsPage:
    runs = queries.list_runs(
        session, suite=suite, model=model, toolset_version=toolset_version, limit=limit, offset=offset
    )
    filters = {"suite": suite or "", "model": model or "", "toolset_version": toolset_version or ""}
    params = {k: v for k, v in filters.items() if v}

    def page_url(at: int) -> str:
        return "?" + urlencode({**params, "offset": max(at, 0), "limit": runs.limit})

    rows = [
        RunRow(
            r,
            blocking(r),
            [cell(r.families[f.key]) for f in RATIO_FAMILIES],
            cell(RatioPublic(num=r.dependency_violations, den=r.dependency_checks)),
            pass_cell(r),
        )
        for r in runs.data
    ]
    return RunsPage(rows, runs.count, filters, pager(runs.count, runs.limit, runs.offset, page_url), COLUMNS)


@router.get("/", response_class=HTMLResponse)
def runs(
    request: Request,
    session: ReadSession,
    suite: str | None = None,
    model: str | None = None,
    toolset_version: str | None = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> HTMLResponse:
    page = runs_page(
        session,
        suite=suite or None,
        model=model or None,
        toolset_version=toolset_version or None,
        limit=limit,
        offset=offset,
    )
    return render(request, "runs.html", page=page)
