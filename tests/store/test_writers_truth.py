"""Issue 46: concurrent writers get the truth, and every process exits. Real
processes: six imports of one run name into a fresh SQLite file; a worker
killed half-way through sending a result; a migration in progress met by
another process (SQLite and PostgreSQL); a second process holding SQLite's
write lock past the busy timeout, met by `toollens import` and by a route."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.store.db import busy_ms
from app.web.app import create_app

TOOLLENS = str(Path(sys.executable).with_name("toollens"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SUITE = str(EXAMPLES / "suite_v1.yaml")
ROOT = Path(__file__).resolve().parents[2]


def big_file(path: Path, copies: int) -> Path:
    """The example records ``copies`` times over (each copy its own trials)."""
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    with path.open("w") as fh:
        for k in range(copies):
            for line in lines:
                rec = json.loads(line)
                rec["trial"] += 10 * k
                fh.write(json.dumps(rec) + "\n")
    return path


def python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1] if err.strip() else ""


def race(src: Path, url: str, n: int) -> Counter[tuple[int, str]]:
    """``n`` imports of ``src`` into one run name at once: (exit code, last line) of each."""
    procs = [
        subprocess.Popen(
            [TOOLLENS, "import", str(src), "--suite", SUITE, "--run", "samename", "--db", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    said: Counter[tuple[int, str]] = Counter()
    for p in procs:
        _, err = p.communicate(timeout=120)  # a hang fails here
        said[(p.returncode, last_line(err))] += 1
    return said


TRUTHS = {
    "error: run 'samename' was created by another writer during this import: import again to append to it",
    "error: run 'samename' is finished: it takes no new trajectories",
}


def check_one_stored(said: Counter[tuple[int, str]], url: str) -> None:
    stored = [line for code, line in said if code == 0]
    assert len(stored) == 1 and "stored 1440 trajectories" in stored[0], said
    assert all(code == 2 and line in TRUTHS for code, line in said if code != 0), said  # no "schema is older",
    engine = create_engine(url)  # no "database is locked"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one() == 1440
    engine.dispose()


def test_six_imports_of_one_run_name_into_a_fresh_file_end_with_the_truth(tmp_path: Path) -> None:
    src = big_file(tmp_path / "big.jsonl", 40)  # over 1 MiB: each import scores in a worker process
    assert src.stat().st_size > 1 << 20
    db = tmp_path / "fresh.db"  # not migrated yet: the six meet each other's migration too
    check_one_stored(race(src, str(db), 6), f"sqlite:///{db}")


def test_imports_of_one_run_name_into_postgresql_end_with_the_truth(pg_url: str, tmp_path: Path) -> None:
    src = big_file(tmp_path / "big.jsonl", 40)
    check_one_stored(race(src, pg_url, 4), pg_url)


HALF_A_MESSAGE = """
import os, struct, sys, time
from pathlib import Path
from app.store.scoring_worker import ScoringWorker

def half_a_message(marker: str) -> None:
    # in the worker: start a result of 1,000 bytes on the pool's result pipe, send 10, and stop there
    frame = sys._getframe()
    while frame.f_code.co_name != "_process_worker":  # the pool's worker loop holds the result queue
        frame = frame.f_back
    queue = frame.f_locals["result_queue"]
    os.write(queue._writer.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    Path(marker).touch()
    time.sleep(600)

if __name__ == "__main__":
    sys.modules["half"] = sys.modules["__main__"]
    worker = ScoringWorker(start="fork")
    worker.ready.result(timeout=60)
    fut = worker.submit(half_a_message, sys.argv[1])
    while not Path(sys.argv[1]).exists():
        if fut.done(): print(fut.exception(), flush=True); break
        time.sleep(0.01)
    worker.kill()
    zombies = []
    for task in Path("/proc/self/task").iterdir():
        for child in (task / "children").read_text().split():
            stat = Path(f"/proc/{child}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                zombies.append(child)
    print("killed; zombies:", zombies, flush=True)
"""


def test_a_worker_killed_half_way_through_a_result_leaves_its_process_free_to_exit(tmp_path: Path) -> None:
    proc = python(HALF_A_MESSAGE, str(tmp_path / "sent"))
    try:
        out, err = proc.communicate(timeout=60)  # it hung at exit, joining the pool's manager, for good
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the process did not exit: {out} {err}")
    assert proc.returncode == 0, err
    assert out.strip() == "killed; zombies: []"


HOLD_A_MIGRATION = """
import sys, time
from sqlalchemy import text
from app.store.db import lock_migrations, make_engine
url, head, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
engine = make_engine(url)
with engine.connect() as conn:
    conn.execution_options(sqlite_immediate=True)
    with conn.begin():  # as migrations/env.py: the lock first, then the schema moves to head
        lock_migrations(conn)
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
        print("migrating", flush=True)
        time.sleep(seconds)
engine.dispose()
print("done", flush=True)
"""


def test_a_process_meeting_a_migration_in_progress_waits_for_it(db_url: str, tmp_path: Path) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:  # the schema as it was before the last migrations, said so by its version
        head = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        conn.execute(text("UPDATE alembic_version SET version_num = '0008'"))
    engine.dispose()
    migration = python(HOLD_A_MIGRATION, db_url, head, "2")
    assert migration.stdout is not None and migration.stdout.readline().strip() == "migrating"
    started = time.monotonic()
    done = subprocess.run(
        [
            TOOLLENS,
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            SUITE,
            "--run",
            "after",
            "--db",
            db_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    waited = time.monotonic() - started
    migration.communicate(timeout=30)
    assert done.returncode == 0, done.stderr  # was: the database schema (0008) is older than this code
    assert "stored 36 trajectories" in done.stderr
    assert waited > 1.0  # it waited for the migration to end
    # no migration running: an older schema is said to be older, at once
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0008'"))
    engine.dispose()
    old = subprocess.run(
        [TOOLLENS, "import", str(EXAMPLES / "trajectories_v1.jsonl"), "--suite", SUITE, "--run", "old", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert old.returncode == 2 and f"the database schema (0008) is older than this code ({head})" in old.stderr


HOLD_THE_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def test_a_lock_past_the_busy_timeout_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert busy_ms() == 30_000  # the documented wait, unless TOOLLENS_DB_BUSY_TIMEOUT says otherwise
    db = tmp_path / "t.db"
    url = f"sqlite:///{db}"
    monkeypatch.setenv("TOOLLENS_DB_BUSY_TIMEOUT", "1.5")
    with TestClient(create_app(Settings(database_url=url))) as client:  # migrates the fresh file
        suite = load_suite_document(Path(SUITE))
        holder = python(HOLD_THE_WRITE_LOCK, str(db), "120")  # held until killed below
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            r = client.post("/api/runs", json={"name": "r", "suite": suite})
            waited = time.monotonic() - started
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "2"
            body = r.json()
            assert set(body) == {"error", "detail"} and body["detail"] == []
            assert (
                "stayed locked by another writer for 2 s (the busy timeout, TOOLLENS_DB_BUSY_TIMEOUT)" in body["error"]
            )
            assert 1.4 < waited < 5
            assert client.get("/api/runs").status_code == 200  # readers are not held up
            started = time.monotonic()
            imp = subprocess.run(
                [
                    TOOLLENS,
                    "import",
                    str(EXAMPLES / "trajectories_v1.jsonl"),
                    "--suite",
                    SUITE,
                    "--run",
                    "imp",
                    "--db",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "TOOLLENS_DB_BUSY_TIMEOUT": "1.5"},
            )
            assert imp.returncode == 2
            assert (
                "stayed locked by another writer for 2 s (the busy timeout, TOOLLENS_DB_BUSY_TIMEOUT): try "
                "again once that writer is done" in imp.stderr
            ), imp.stderr
        finally:
            holder.kill()
            holder.communicate()
        assert client.post("/api/runs", json={"name": "r", "suite": suite}).status_code == 201


def test_an_unexpected_error_is_a_json_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.store import queries

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(queries, "list_runs", broken)
    with TestClient(
        create_app(Settings(database_url=f"sqlite:///{tmp_path / 't.db'}")), raise_server_exceptions=False
    ) as client:
        r = client.get("/api/runs")
    assert r.status_code == 500
    assert r.json() == {"error": "something went wrong on the server: the error is in its log", "detail": []}
