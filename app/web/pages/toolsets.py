"""The toolsets pages: every toolset with its versions, and one toolset's two
versions side by side (descriptions, schemas, lint, the runs of each)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.core.score.families import RATIO_FAMILIES
from app.store import lint as linting
from app.store import queries
from app.store.views import RatioPublic, RunPublic, RunsPublic, ToolsetDiffPublic, ToolsetPublic
from app.web.deps import ReadSession, render
from app.web.pages.runs import COLUMNS, Column

router = APIRouter()

_FIRST_OF_CODE = {f.code: f.key for f in reversed(RATIO_FAMILIES)}  # reversed: the first of each code stays
RUN_COLUMNS = [c for c in COLUMNS if c.key in _FIRST_OF_CODE.values()]  # a version's runs: a figure of F1..F4 each


@dataclass(frozen=True)
class ToolsetRow:
    toolset: ToolsetPublic
    tools: int  # in its newest version
    runs: int  # over all its versions


def toolset_rows(session: Session) -> list[ToolsetRow]:
    return [
        ToolsetRow(ts, len(ts.versions[-1].tools), sum(v.runs for v in ts.versions))
        for ts in queries.list_toolsets(session)
    ]


@dataclass(frozen=True)
class RunRow:
    """A run of a version, its families in the page's columns."""

    run: RunPublic
    cells: list[RatioPublic | None]


@dataclass
class ToolsetPage:
    toolset: ToolsetPublic
    diff: ToolsetDiffPublic | None
    runs_a: RunsPublic | None
    runs_b: RunsPublic | None
    a: str
    b: str
    detail: linting.VersionsDiffPublic | None = None  # per tool: description, schema, findings, figures
    lint: linting.LintPublic | None = None  # the only version's findings
    columns: list[Column] = field(default_factory=lambda: RUN_COLUMNS)  # of the runs of each version

    @property
    def run_tables(self) -> list[tuple[str, list[RunRow]]]:
        """The runs of version A and of version B, a cell per column."""
        return [
            (label, [RunRow(r, [r.families.get(c.key) for c in self.columns]) for r in (runs.data if runs else [])])
            for label, runs in (("A", self.runs_a), ("B", self.runs_b))
        ]


def toolset_page(session: Session, name: str, a: str | None, b: str | None) -> ToolsetPage:
    ts = queries.get_toolset(session, name)
    versions = ts.versions
    if len(versions) < 2 and a is None and b is None:
        return ToolsetPage(ts, None, None, None, "", "", lint=linting.version_lint(session, name, versions[-1].hash))
    a = a or versions[max(len(versions) - 2, 0)].hash
    b = b or versions[-1].hash
    diff = queries.diff_toolset(session, name, a, b)
    return ToolsetPage(
        ts,
        diff,
        queries.list_runs(session, toolset_version=diff.a, limit=20),
        queries.list_runs(session, toolset_version=diff.b, limit=20),
        diff.a,
        diff.b,
        detail=linting.diff_versions(session, name, diff.a, diff.b),
    )


@router.get("/toolsets", response_class=HTMLResponse)
def toolsets(request: Request, session: ReadSession) -> HTMLResponse:
    return render(request, "toolsets.html", rows=toolset_rows(session))


@router.get("/toolsets/{name:path}", response_class=HTMLResponse)
def toolset(
    request: Request, name: str, session: ReadSession, a: str | None = None, b: str | None = None
) -> HTMLResponse:
    return render(request, "toolset.html", page=toolset_page(session, name, a or None, b or None))
