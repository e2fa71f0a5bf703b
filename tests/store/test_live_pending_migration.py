"""Migration 0012: mcp-serve's pending records leave ``runs.config`` for the ``live_pending`` table.
A run recorded before it, with sessions still pending, keeps them (and stores them as before); a
downgrade puts them back in the config. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from alembic import command

from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite_document
from app.store import ingest, live
from app.store.db import _alembic_config, make_engine, make_sessionmaker, session_scope, upgrade
from app.store.models import Run
from tests.mcp.test_mcp import SUITE


def _record(case_id: str, trial: int, *names: str) -> dict[str, Any]:
    calls = [{"name": n, "arguments": {"rut": "12345678-9"}, "result": "{}"} for n in names]
    return {"case_id": case_id, "trial": trial, "question": "¿Cuál es mi saldo?", "calls": calls, "answer": ""}


def test_pending_records_in_a_runs_config_are_carried_over_and_back(db_url: str) -> None:
    command.downgrade(_alembic_config(db_url), "0011")
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    waiting = {
        "con:1@aa": _record("saldo-001", 0, "buscar_cliente"),
        "con:2@bb": _record("saldo-001", 3, "buscar_cliente", "ver_saldo"),
        "http:x@aa": _record("saldo-002", 1),
    }
    servers = {"aa": {"host": "h", "pid": 1}}
    with session_scope(sessions, write=True) as s:  # as mcp-serve kept them before 0012
        suite_row = ingest.ensure_suite(s, load_suite_document(SUITE))
        for name, pending in [("live", waiting), ("idle", {}), ("batch", None)]:
            config = {"faults": None, "live_servers": servers} | ({} if pending is None else {"live_pending": pending})
            ingest.create_run(s, name=name, suite_row=suite_row, config=config)
    upgrade(db_url)
    with session_scope(sessions, write=True) as s:
        live_id, idle_id, batch_id = (ingest.find_run(s, n).id for n in ("live", "idle", "batch"))
        assert live.pending(s, live_id) == waiting and live.pending(s, idle_id) == {}
        assert [s.get(Run, i).config for i in (live_id, idle_id, batch_id)] == [  # type: ignore[union-attr]
            {"faults": None, "live_servers": servers}
        ] * 3
        assert live.next_trial(s, live_id, "saldo-001") == 4 and live.next_trial(s, live_id, "saldo-003") == 0
        run = ingest.get_run_row(s, live_id)
        assert live.flush_pending(s, live_id, Scorer(ingest.suite_for_run(s, run)), ["con:1@aa"]) == 1
    command.downgrade(_alembic_config(db_url), "0011")
    with session_scope(sessions) as s:
        configs = {r.name: r.config for r in s.query(Run)}
    engine.dispose()
    assert configs["live"] == {
        "faults": None,
        "live_servers": servers,
        "live_pending": {k: v for k, v in waiting.items() if k != "con:1@aa"},
    }
    assert configs["idle"] == configs["batch"] == {"faults": None, "live_servers": servers}
