"""Reads never write: every GET route of the app's router (pages, the JSON API, assets), listed
from the router itself, answers over a database it cannot write to: on SQLite a read-only file
in a read-only folder, opened read-only (``mode=ro``: the tests may run as root, whom file modes
do not stop); on PostgreSQL sessions whose transactions are read-only. One of the runs was
stored before ToolLens kept causes: its page says it needs ``toollens db backfill`` instead of
computing them. And each request resolves its run once, and the trajectory page loads its
trajectory once: counted on the statements the engine runs."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import delete, event, select

from app.core.suites.suite import load_suite_document
from app.runner.session import RunRequest, run_agent
from app.settings import Settings
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import RunCounter, TrajectoryRow, TrajectoryTag
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HTML = {"accept": "text/html"}
OLD, NEW, CONVERSATIONS = 1, 2, 3  # the run stored before causes were kept, its successor, a conversation run


@dataclass
class Served:
    url: str  # the database as the app opens it: read-only
    pair: tuple[int, int]  # one case's trajectories in runs OLD and NEW
    conversation: int  # a trajectory of the conversation run
    failed_old: int  # a failed trajectory of run OLD


def _store(db_url: str) -> tuple[tuple[int, int], int, int]:
    """Three runs: two imported through the API (the first made old), one recorded with the simulated user."""
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        for version in ("v1", "v2"):
            doc = load_suite_document(EXAMPLES / f"suite_{version}.yaml")
            rid = c.post("/api/runs", json={"name": version, "suite": doc}).json()["id"]
            recs = [json.loads(x) for x in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]
            assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
            assert c.post(f"/api/runs/{rid}/finish").status_code == 200
    assert run_agent(
        Settings(database_url=db_url),
        RunRequest(agent="simulated", suite_path=EXAMPLES / "conversaciones_v2.yaml", run_name="conversations", seed=5),
    ).finished
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine), write=True) as s:  # run OLD as an older ToolLens stored it
        s.execute(delete(RunCounter).where(RunCounter.run_id == OLD, RunCounter.kind == "cause"))
        s.execute(delete(TrajectoryTag).where(TrajectoryTag.run_id == OLD, TrajectoryTag.kind == "cause"))
        for t in s.scalars(select(TrajectoryRow).where(TrajectoryRow.run_id == OLD)):
            t.detail = {k: v for k, v in t.detail.items() if k != "divergence"}
        old = dict(
            s.execute(
                select(TrajectoryRow.case_id, TrajectoryRow.id)
                .where(TrajectoryRow.run_id == OLD)
                .order_by(TrajectoryRow.id.desc())
            ).all()
        )
        new = s.execute(
            select(TrajectoryRow.case_id, TrajectoryRow.id)
            .where(TrajectoryRow.run_id == NEW)
            .order_by(TrajectoryRow.id)
        ).all()
        pair = next((old[case], tid) for case, tid in new if case in old)
        conversation = s.scalar(select(TrajectoryRow.id).where(TrajectoryRow.run_id == CONVERSATIONS).limit(1))
        failed = s.scalar(select(TrajectoryRow.id).where(TrajectoryRow.run_id == OLD, ~TrajectoryRow.passed).limit(1))
    engine.dispose()
    assert conversation is not None and failed is not None
    return pair, conversation, failed


@pytest.fixture()
def served(db_url: str, tmp_path: Path) -> Iterator[Served]:
    pair, conversation, failed = _store(db_url)
    if not db_url.startswith("sqlite"):
        yield Served(
            db_url.replace("?options=", "?options=-cdefault_transaction_read_only%3Don%20"), pair, conversation, failed
        )
        return
    folder = tmp_path / "read-only"
    folder.mkdir()
    path = folder / "toollens.db"
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as source, sqlite3.connect(path) as copy:
        source.backup(copy)  # what the write-ahead log holds too
        copy.execute("PRAGMA journal_mode=DELETE")  # a file alone: WAL would need a -shm file beside it
    copy.close()
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        yield Served(f"sqlite:///file:{path}?mode=ro&uri=true", pair, conversation, failed)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in folder.iterdir()) == ["toollens.db"]
    finally:
        folder.chmod(stat.S_IRWXU)


def _params(dependant: Any) -> tuple[set[str], set[str]]:
    """A route's path parameters and required query parameters, its dependencies' included."""
    path = {p.name for p in dependant.path_params}
    query = {p.name for p in dependant.query_params if p.field_info.is_required()}
    for sub in dependant.dependencies:
        p, q = _params(sub)
        path, query = path | p, query | q
    return path, query


def get_routes(app: FastAPI, s: Served) -> list[tuple[str, str, dict[str, Any]]]:
    """Every GET route of the app's router: (its path, a URL that asks for stored things, the query).
    A route whose parameters are not known here fails the test: a new route gets a value here."""
    pages = {"run_id": OLD, "trajectory_id": s.pair[0], "name": "atencion_cliente", "suite_id": 1}
    queries: dict[str, dict[str, Any]] = {
        "/api/compare": {"a": OLD, "b": NEW},
        "/compare": {"a": OLD, "b": NEW},
        "/api/compare/trajectories": {"a": s.pair[0], "b": s.pair[1]},
        "/compare/trajectories": {"a": s.pair[0], "b": s.pair[1]},
        "/api/toolsets/{name:path}/diff": {"a": "v1", "b": "v2"},
        "/api/toolsets/{name:path}/versions": {"a": "v1", "b": "v2"},
        "/api/toolsets/{name:path}/lint": {"version": "v1"},
    }
    assets = {"/static/{version}/{name}": {"version": "0", "name": "app.css"}, "/static/{name}": {"name": "app.css"}}
    out = []
    for rc in iter_route_contexts(app.router.routes):
        if "GET" not in (rc.methods or ()):
            continue
        values = {**pages, **assets.get(rc.path, {})}
        dependant = getattr(rc.original_route, "dependant", None)  # None: Starlette's own routes (the docs)
        needed, required = (
            _params(dependant) if dependant is not None else (set(re.findall(r"\{(\w+)", rc.path)), set())
        )
        assert needed <= set(values), f"{rc.path}: no value for {needed - set(values)}"
        query = queries.get(rc.path, {})
        assert required <= set(query), f"{rc.path}: no value for {required - set(query)}"
        url = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m, v=values: str(v[m.group(1)]), rc.path)
        out.append((rc.path, url, query))
    return out


class Statements:
    """The statements an engine runs, and the writes among them."""

    def __init__(self, app: FastAPI) -> None:
        self.seen: list[str] = []
        event.listen(app.state.engine, "before_cursor_execute", self._add)

    def _add(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.seen.append(" ".join(statement.split()))

    def writes(self) -> list[str]:
        """The writes, but for the OTLP receiver's: it tries to take its lease in the background (a
        server that may accept spans), which a read-only database refuses; no request waits on it."""
        return [
            s
            for s in self.seen
            if s.split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE") and "otlp_leases" not in s
        ]

    def count(self, table: str) -> int:
        """Statements that read one row of ``table`` by its id."""
        return sum(1 for s in self.seen if f"FROM {table}" in s and re.search(rf"WHERE {table}\.id = ", s))


def test_every_get_route_answers_over_a_database_it_cannot_write(served: Served) -> None:
    app = create_app(Settings(database_url=served.url, auto_migrate=False))
    seen = Statements(app)
    with TestClient(app) as c:
        routes = get_routes(app, served)
        assert len(routes) >= 30 and {"/runs/{run_id}", "/api/runs/{run_id}/figures"} <= {p for p, _, _ in routes}
        extra = [(f"/runs/{r}", f"/runs/{r}", {}) for r in (NEW, CONVERSATIONS)] + [
            ("/runs/{run_id}", f"/runs/{OLD}", {"passed": "false"}),
            ("/trajectories/{trajectory_id}", f"/trajectories/{served.conversation}", {}),
            ("/toolsets/{name:path}", "/toolsets/atencion_cliente", {"a": "v1", "b": "v2"}),
        ]
        seen.seen.clear()
        for path, url, query in routes + extra:
            r = c.get(url, params=query, headers=HTML if not url.startswith(("/api", "/v1")) else {})
            assert r.status_code == 200, (path, url, r.status_code, r.text[:300])
        assert seen.writes() == []
        page = c.get(f"/runs/{OLD}", headers=HTML).text
        assert "<b>23</b> failed trajectories have no cause counted" in page
        assert "<code>toollens db backfill --run v1</code>" in page
        assert c.get(f"/api/runs/{OLD}/figures").json()["causes_missing"] == 23
        assert "causes_missing" not in c.get(f"/api/runs/{NEW}/figures").json()
        page = c.get(f"/trajectories/{served.failed_old}", headers=HTML).text
        assert "No first divergence stored" in page and "<code>toollens db backfill --run v1</code>" in page
        assert "No first divergence stored" not in c.get(f"/trajectories/{served.pair[1]}", headers=HTML).text
        for url in ("/runs/999", "/api/runs/999/figures", "/trajectories/99999", "/api/trajectories/99999"):
            assert c.get(url, headers=HTML).status_code == 404, url  # the documented answer for an unknown id
        assert seen.writes() == []


def test_the_otlp_receiver_says_once_that_a_read_only_database_takes_no_spans(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "02",
        "name": "agent",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [],
    }
    with (
        caplog.at_level(logging.WARNING, logger="toollens.otlp"),
        TestClient(create_app(Settings(database_url=served.url, auto_migrate=False))) as c,
    ):
        r = c.post("/v1/traces", json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
        assert r.status_code == 503 and "the database is read-only" in r.text, r.text
        assert c.get("/api/runs").status_code == 200
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "toollens.otlp"]
    assert said[0] == (
        "WARNING",
        "the database is read-only: the OTLP receiver stores no spans (a request gets "
        "503) until the server is started on a writable one",
    ), said
    assert not any(level == "ERROR" for level, _ in said), said


def test_each_request_resolves_its_run_once_and_the_trajectory_page_loads_its_trajectory_once(served: Served) -> None:
    app = create_app(Settings(database_url=served.url, auto_migrate=False))
    seen = Statements(app)
    with TestClient(app) as c:
        for path, url, query in get_routes(app, served):
            if "{run_id}" not in path:
                continue
            seen.seen.clear()
            assert c.get(url, params=query, headers=HTML).status_code == 200, url
            assert seen.count("runs") == 1, (url, [s for s in seen.seen if "FROM runs" in s])
        for url in (f"/trajectories/{served.pair[0]}", f"/trajectories/{served.conversation}"):
            seen.seen.clear()
            assert c.get(url, headers=HTML).status_code == 200
            assert (seen.count("runs"), seen.count("trajectories")) == (1, 1), url
            assert sum(1 for s in seen.seen if s.startswith("SELECT calls.id")) == 1, url
        seen.seen.clear()
        assert c.get("/compare", params={"a": OLD, "b": NEW}, headers=HTML).status_code == 200
        assert seen.count("runs") == 2  # each run once
