"""Lint findings where the figures are: a run's findings beside the confusion
cells of the same pair (both directions), a toolset version's findings, and
the per-tool diff of two versions with the figures of the runs that used
each."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.advise.lint import RULES, Finding, lint_pairs, lint_toolset
from app.core.bounded import BoundedCache
from app.core.suites.schemadiff import schema_changes
from app.core.suites.tools import Toolset
from app.core.textdiff import word_diff
from app.store.ingest import find_run, get_run_row, suite_for_run
from app.store.models import RunCounter, ToolsetVersion
from app.store.queries import _find_version
from app.store.toolsets import version_dependencies, version_tool_figures
from app.store.views import RatioPublic, SchemaChangeView, SegmentView


class FindingPublic(BaseModel):
    rule: str
    tool: str
    related: list[str]
    field: str | None
    score: float | None
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class PairPublic(BaseModel):
    """Two tools: how often each was called where the other was expected,
    and the findings that say they read alike."""

    a: str
    b: str
    a_called_as_b: int  # expected a, called b
    b_called_as_a: int  # expected b, called a
    findings: list[FindingPublic]


class FieldPublic(BaseModel):
    tool: str
    field: str
    schema_errors: int
    findings: list[FindingPublic]


class LintPublic(BaseModel):
    toolset: str
    version: str
    label: str
    dependencies: list[list[str]]
    counts: dict[str, int]
    findings: list[FindingPublic]


class RunLintPublic(LintPublic):
    run_id: int
    pairs: list[PairPublic]
    fields: list[FieldPublic]
    destructive: list[str] = Field(default_factory=list)  # tools their server marks destructive (MCP hint)


def _public(f: Finding) -> FindingPublic:
    return FindingPublic(**f.to_dict())


_CACHE: BoundedCache[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], list[Finding]] = (
    BoundedCache(64)
)


def _findings(toolset: Toolset, pairs: list[tuple[str, str]]) -> list[Finding]:
    """Lint once per content (a large toolset takes a noticeable time: O(tools²) pairs)."""
    key = (toolset.version, tuple(toolset.dependencies), tuple(pairs))
    found = _CACHE.get(key)
    if found is None:
        found = lint_toolset(toolset, pairs)
        _CACHE.put(key, found)
    return found


def _lint(toolset: Toolset, pairs: list[tuple[str, str]], name: str, version: str, label: str) -> LintPublic:
    findings = _findings(toolset, pairs)
    counts = {r: sum(f.rule == r for f in findings) for r in RULES}
    deps = list(dict.fromkeys([*toolset.dependencies, *pairs]))
    return LintPublic(
        toolset=name,
        version=version,
        label=label,
        dependencies=[list(p) for p in deps],
        counts=counts,
        findings=[_public(f) for f in findings],
    )


def version_lint(session: Session, toolset: str, ref: str) -> LintPublic:
    """Lint a stored version, with the dependency pairs its suites declare."""
    v = _find_version(session, toolset, ref)
    return _version_lint(session, v)


def _version_lint(session: Session, v: ToolsetVersion) -> LintPublic:
    ts = Toolset.from_list(v.tools, name=v.toolset, label=v.label)
    return _lint(ts, version_dependencies(session, v.id), v.toolset, v.hash, v.label)


def run_lint(session: Session, run_id: int) -> RunLintPublic:
    """The run's suite linted, each pair finding beside the run's confusion
    cells of that pair in both directions, each field finding beside the
    schema errors of that field."""
    run = get_run_row(session, run_id)
    suite = suite_for_run(session, run)
    pairs = list(dict.fromkeys([*suite.dependencies, *(p for c in suite.cases for p in c.dependencies)]))
    v = session.get(ToolsetVersion, run.toolset_version_id)
    assert v is not None
    base = _lint(suite.toolset, pairs, v.toolset, v.hash, v.label)
    cells = _counters(session, run_id, "confusion")
    schema = _counters(session, run_id, "schema_error")
    pair_rows = [
        PairPublic(
            a=p.a,
            b=p.b,
            a_called_as_b=p.a_called_as_b,
            b_called_as_a=p.b_called_as_a,
            findings=[_public(f) for f in p.findings],
        )
        for p in lint_pairs(_findings(suite.toolset, pairs), cells, (t.name for t in suite.toolset))
    ]
    fields: dict[tuple[str, str], list[FindingPublic]] = {}
    for f in base.findings:
        if f.rule == "argument_format" and f.field is not None:
            fields.setdefault((f.tool, f.field), []).append(f)
    field_rows = [
        FieldPublic(tool=t, field=fl, schema_errors=schema.get((t, fl), 0), findings=fs)
        for (t, fl), fs in fields.items()
    ]
    field_rows.sort(key=lambda x: (-x.schema_errors, x.tool, x.field))
    return RunLintPublic(
        **base.model_dump(),
        run_id=run_id,
        pairs=pair_rows,
        fields=field_rows,
        destructive=[t.name for t in suite.toolset if t.destructive],
    )


def _counters(session: Session, run_id: int, kind: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for a, b, value in session.execute(
        select(RunCounter.a, RunCounter.b, RunCounter.value).where(RunCounter.run_id == run_id, RunCounter.kind == kind)
    ):
        out[(a, b)] = out.get((a, b), 0) + int(value)
    return out


def run_confusions(session: Session, run_ref: str) -> tuple[dict[str, Any], dict[tuple[str, str], int]]:
    """A run (by id or name) and its confusion cells, ``(expected, called) -> count``,
    for ``toollens lint --run``."""
    run = find_run(session, run_ref)
    cells = _counters(session, run.id, "confusion")
    listed = [
        {"expected": e, "called": c, "count": n}
        for (e, c), n in sorted(cells.items(), key=lambda x: -x[1])
        if e != c and n
    ]
    return {"id": run.id, "name": run.name, "confusions": listed}, cells


class ToolDiffPublic(BaseModel):
    """One tool across two versions: name (added/removed), description word
    diff, schema changes, findings and per-tool figures on each side."""

    name: str
    change: str  # added | removed | changed | same
    description_a: str | None
    description_b: str | None
    segments: list[dict[str, str]]
    schema_changes: list[dict[str, str | None]]
    findings_a: list[FindingPublic]
    findings_b: list[FindingPublic]
    precision_a: RatioPublic | None
    recall_a: RatioPublic | None
    precision_b: RatioPublic | None
    recall_b: RatioPublic | None

    # typed, for the page (properties: the JSON is the fields')
    @property
    def segment_views(self) -> list[SegmentView]:
        return SegmentView.all(self.segments)

    @property
    def schema_change_rows(self) -> list[SchemaChangeView]:
        return SchemaChangeView.all(self.schema_changes)


class VersionsDiffPublic(BaseModel):
    toolset: str
    a: str
    b: str
    lint_a: LintPublic
    lint_b: LintPublic
    tools: list[ToolDiffPublic]


def _about(findings: list[FindingPublic], tool: str) -> list[FindingPublic]:
    """The findings about a tool's own description (a similar pair names both)."""
    return [f for f in findings if f.tool == tool or (f.rule == "similar_pair" and tool in f.related)]


def diff_versions(session: Session, toolset: str, a: str, b: str) -> VersionsDiffPublic:
    """Any two versions of a toolset, tool by tool."""
    va, vb = _find_version(session, toolset, a), _find_version(session, toolset, b)
    la, lb = _version_lint(session, va), _version_lint(session, vb)
    fa, fb = version_tool_figures(session, va.id), version_tool_figures(session, vb.id)
    ta = {str(t["name"]): t for t in va.tools}
    tb = {str(t["name"]): t for t in vb.tools}
    rows = []
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        da = None if x is None else str(x.get("description", ""))
        db = None if y is None else str(y.get("description", ""))
        changes = [] if x is None or y is None else schema_changes(x.get("parameters"), y.get("parameters"))
        change = "added" if x is None else "removed" if y is None else "changed" if (da != db or changes) else "same"
        rows.append(
            ToolDiffPublic(
                name=name,
                change=change,
                description_a=da,
                description_b=db,
                segments=[{"op": s.op, "text": s.text} for s in word_diff(da or "", db or "")],
                schema_changes=[{"path": c.path, "op": c.op, "a": c.a, "b": c.b} for c in changes],
                findings_a=_about(la.findings, name) if x is not None else [],
                findings_b=_about(lb.findings, name) if y is not None else [],
                precision_a=fa[name][0] if name in fa else None,
                recall_a=fa[name][1] if name in fa else None,
                precision_b=fb[name][0] if name in fb else None,
                recall_b=fb[name][1] if name in fb else None,
            )
        )
    order = {"changed": 0, "added": 1, "removed": 2, "same": 3}
    rows.sort(key=lambda r: (order[r.change], r.name))
    return VersionsDiffPublic(toolset=toolset, a=va.hash, b=vb.hash, lint_a=la, lint_b=lb, tools=rows)
