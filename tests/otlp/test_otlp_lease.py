"""OTLP staging owned by one server (its lease), and stored traces recognised by the
database: receivers of their own in this process, as in separate servers; SQLite and
PostgreSQL. (tests/store/test_kills.py does the same with real processes and SIGKILL.)"""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from app.settings import Settings
from app.store.db import session_scope
from app.store.models import OtlpBatch, OtlpLease, OtlpTrace
from app.web.app import create_app
from tests.otlp.test_otlp import SUITE, TRACE, span
from tests.otlp.test_otlp_bad_input import fresh_receiver, send

ROOT = span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c"})
CALL = span(TRACE, "02", "01", 20, tool="ver_saldo")
LATE = span(TRACE, "03", "01", 30, tool="buscar_cliente")


def new_run(db_url: str) -> int:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        r = client.post("/api/runs", json={"name": "otlp", "suite": SUITE})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])


def count(r: object, model: type) -> int:
    with session_scope(r.sessions) as s:  # type: ignore[attr-defined]
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_a_live_servers_staged_requests_are_never_taken_an_expired_ones_are(db_url: str) -> None:
    run_id = new_run(db_url)
    a = fresh_receiver(db_url, settle=3600, idle=3600)
    assert send(a, run_id, ROOT, CALL)  # staged under a's lease, buffered, not stored yet
    b = fresh_receiver(db_url)  # a second server on the same database
    assert b.recover() == 0 and b.recover() == 0  # a is alive: nothing of it taken
    a.die()  # a's lease expires with it (PostgreSQL: its lock's connection closed)
    assert b.recover() == 2 and b.store_ready(everything=True) == 1
    assert count(b, OtlpBatch) == 0
    b.close()  # nothing staged under b's lease any more: the lease row goes
    assert count(b, OtlpLease) == 0 and count(b, OtlpTrace) == 1


def test_a_trace_sent_again_after_a_restart_is_not_stored_twice(db_url: str) -> None:
    run_id = new_run(db_url)
    first = fresh_receiver(db_url, settle=0)
    assert send(first, run_id, ROOT, CALL) and first.store_ready(everything=True) == 1
    first.die()
    restarted = fresh_receiver(db_url, settle=0)  # remembers nothing of what the other one stored
    assert send(restarted, run_id, ROOT, CALL)
    assert restarted.store_ready(everything=True) == 0  # the database knows the trace: taken again...
    assert restarted.store_ready(everything=True) == 0  # ...and its spans are repeats, dropped
    assert (restarted.stats.duplicate_spans, restarted.stats.stored_spans, restarted.buffered_spans) == (2, 0, 0)
    assert send(restarted, run_id, ROOT, LATE)  # a span the trace did not have: another trial of it
    assert restarted.store_ready(everything=True) == 1
    with session_scope(restarted.sessions) as s:
        assert s.execute(select(OtlpTrace.span_ids, OtlpTrace.flushes)).one() == (["01", "02", "03"], 2)
    assert count(restarted, OtlpBatch) == 0
    with session_scope(restarted.sessions) as s:
        trials = sorted(s.execute(text("SELECT trial, n_calls FROM trajectories")).all())
    assert [tuple(t) for t in trials] == [(0, 1), (1, 1)]
    restarted.close()


def test_the_lease_thread_stops_when_the_tables_are_dropped_under_it(db_url: str, monkeypatch, caplog) -> None:
    """A server whose database lost its tables (a schema dropped, a file replaced) stops beating at
    once, with one warning, instead of logging a traceback every beat for as long as it lives."""
    import threading
    import weakref

    from app.otlp import staging

    run_id = new_run(db_url)
    r = fresh_receiver(db_url)
    assert send(r, run_id, ROOT, CALL)
    with session_scope(r.sessions, write=True) as s:
        s.execute(text("DROP TABLE otlp_leases"))
    monkeypatch.setattr(staging, "BEAT", 0.01)
    thread = threading.Thread(target=staging._keep_lease, args=(weakref.WeakMethod(r.recover), threading.Event()))
    with caplog.at_level("WARNING", logger="toollens.otlp"):
        thread.start()
        thread.join(5)
    assert not thread.is_alive()
    assert [rec.getMessage() for rec in caplog.records] == [
        "the OTLP staging lease stops: the database no longer holds its tables (ProgrammingError)"
        if db_url.startswith("postgresql")
        else "the OTLP staging lease stops: the database no longer holds its tables (OperationalError)"
    ]
    assert all(rec.exc_info is None for rec in caplog.records)  # no traceback formatted in a background thread
