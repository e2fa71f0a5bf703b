"""Toolset versions outside runs: registering one, and what the runs that
used a version measured, per tool."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.suites.suite import Suite
from app.core.suites.tools import Toolset
from app.store import suites
from app.store.compare import per_tool
from app.store.ingest import ensure_toolset_version
from app.store.models import Run, RunCounter, SuiteRow, ToolsetVersion
from app.store.views import RatioPublic


@dataclass(frozen=True)
class AddedVersion:
    id: int
    toolset: str
    hash: str
    label: str
    created: bool


def add_toolset_version(session: Session, toolset: Toolset, *, name: str, label: str) -> AddedVersion:
    """Register a toolset version by content hash: the same names,
    descriptions and schemas are the same version (its first label kept)."""
    existed = (
        session.scalar(
            select(ToolsetVersion.id).where(ToolsetVersion.toolset == name, ToolsetVersion.hash == toolset.version)
        )
        is not None
    )
    toolset.label = label
    row = ensure_toolset_version(session, name=name, suite=Suite(name=name, toolset=toolset, cases=[]))
    return AddedVersion(id=row.id, toolset=row.toolset, hash=row.hash, label=row.label, created=not existed)


def version_dependencies(session: Session, version_id: int) -> list[tuple[str, str]]:
    """The dependency pairs the stored suites declare for this toolset version
    (toolset-wide, suite-wide and per case), without repeats."""
    seen: dict[tuple[str, str], None] = {}
    rows = list(
        session.scalars(select(SuiteRow).where(SuiteRow.toolset_version_id == version_id).order_by(SuiteRow.id))
    )
    for doc, cases in suites.distinct_parts(session, rows):
        toolset = doc.get("toolset") if isinstance(doc, dict) else None
        raw: list[object] = []
        if isinstance(toolset, dict):
            raw += list(toolset.get("dependencies") or [])
        raw += list(doc.get("dependencies") or []) if isinstance(doc, dict) else []
        for case in cases:
            if isinstance(case, dict):
                raw += list(case.get("dependencies") or [])
        for pair in raw:
            if isinstance(pair, dict):
                pair = [pair.get("before"), pair.get("after")]
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair):
                seen[(str(pair[0]), str(pair[1]))] = None
    return list(seen)


def version_tool_figures(session: Session, version_id: int) -> dict[str, tuple[RatioPublic, RatioPublic]]:
    """Per tool, selection precision and recall over every run that used the
    version (their confusion counters added up)."""
    rows = session.execute(
        select(RunCounter.a, RunCounter.b, RunCounter.value)
        .join(Run, Run.id == RunCounter.run_id)
        .where(Run.toolset_version_id == version_id, RunCounter.kind == "confusion")
    )
    cells: Counter[tuple[str, str]] = Counter()
    for a, b, v in rows:
        cells[(a, b)] += int(v)
    return per_tool(cells)
