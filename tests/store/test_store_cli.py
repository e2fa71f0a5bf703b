"""`toollens import`, `export`, `db upgrade` and the schema version check, on
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text
from typer.testing import CliRunner

from app.cli import cli
from app.store.db import check_schema, make_engine
from app.store.errors import SchemaMismatch
from app.store.models import CallRow, TrajectoryRow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def count(url: str, model: type) -> int:  # type: ignore[type-arg]
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.scalar(select(func.count()).select_from(model))
    engine.dispose()
    return int(n or 0)


def test_import_then_export_gives_the_same_records(db_url: str, tmp_path: Path) -> None:
    src = EXAMPLES / "trajectories_v1.jsonl"
    r = runner.invoke(
        cli,
        [
            "import",
            str(src),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "v1",
            "--model",
            "sim",
            "--batch",
            "7",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "stored 36 trajectories, 79 calls; skipped 0 lines" in r.stderr
    out = tmp_path / "out.jsonl"
    r = runner.invoke(cli, ["export", "v1", "--out", str(out), "--db", db_url])
    assert r.exit_code == 0, r.output
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        json.loads(x) for x in src.read_text().splitlines()
    ]
    # the run was finished by the import: a second import into it is refused
    r = runner.invoke(
        cli, ["import", str(src), "--suite", str(EXAMPLES / "suite_v1.yaml"), "--run", "v1", "--db", db_url]
    )
    assert r.exit_code == 2 and "finished" in r.stderr


def test_bad_lines_store_nothing_unless_skipped(db_url: str, tmp_path: Path) -> None:
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{truncated", lines[1], '{"case_id": 5.5}', lines[0]]) + "\n")
    args = ["import", str(bad), "--suite", str(EXAMPLES / "suite_v1.yaml"), "--run", "r", "--db", db_url]
    r = runner.invoke(cli, args)
    assert r.exit_code == 2
    assert "3 bad lines, nothing stored" in r.stderr
    assert "line 2: not valid JSON" in r.stderr and "line 4: case_id" in r.stderr
    assert "line 5: same case, trial and fault as line 1" in r.stderr
    assert count(db_url, TrajectoryRow) == 0
    r = runner.invoke(cli, [*args, "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert f"skipped {bad}:2:" in r.stderr and "stored 2 trajectories" in r.stderr
    assert count(db_url, TrajectoryRow) == 2
    assert count(db_url, CallRow) == sum(len(json.loads(x)["calls"]) for x in lines[:2])


def test_schema_version_check(db_url: str) -> None:
    engine = make_engine(db_url)
    check_schema(engine, db_url, auto_migrate=False)  # at head: fine
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_future'"))
    with pytest.raises(SchemaMismatch, match="newer than this version of ToolLens"):
        check_schema(engine, db_url, auto_migrate=False)
    engine.dispose()


def test_empty_sqlite_is_migrated_on_first_start_or_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    engine = make_engine(url)
    with pytest.raises(SchemaMismatch, match="run `toollens db upgrade`"):
        check_schema(engine, url, auto_migrate=False)
    check_schema(engine, url, auto_migrate=True)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 16384  # a new file's pages
    engine.dispose()
    r = runner.invoke(cli, ["db", "upgrade", "--db", url])
    assert r.exit_code == 0 and "database at head" in r.stderr


def test_an_upgrade_over_stored_runs_names_the_backfill_once(db_url: str) -> None:
    """Runs an older ToolLens stored may lack causes and comparison aggregates, which pages never
    compute: the upgrade that migrates them says so; an upgrade with nothing to migrate says nothing."""
    from alembic import command

    from app.store.db import _alembic_config

    r = runner.invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "v1",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code == 0, r.output
    command.downgrade(_alembic_config(db_url), "0013")  # as an older ToolLens left it
    r = runner.invoke(cli, ["db", "upgrade", "--db", db_url])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert "1 run was stored by an older ToolLens: `toollens db backfill` gives those that lack them" in said, said
    r = runner.invoke(cli, ["db", "upgrade", "--db", db_url])
    assert r.exit_code == 0 and "backfill" not in r.stderr and "database at head" in r.stderr


def test_a_file_made_with_other_pages_keeps_them(tmp_path: Path) -> None:
    """The page size is set for new files only: one made with 4 KiB pages (before) opens,
    migrates and takes writes with its own pages, in WAL mode."""
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA page_size=4096")
        raw.execute("CREATE TABLE made_before (x)")
    raw.close()
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    check_schema(engine, url, auto_migrate=True)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO made_before VALUES (1)")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("SELECT count(*) FROM made_before").scalar() == 1
    engine.dispose()


def test_bad_database_url_is_a_clear_error() -> None:
    r = runner.invoke(cli, ["db", "upgrade", "--db", "mysql://x"])
    assert r.exit_code == 2 and r.stderr == (
        "error: --db (or TOOLLENS_DATABASE_URL): must be a SQLite file's path, "
        "or a sqlite:/// or postgresql+psycopg:// URL, not 'mysql://x'\n"
    )


def test_migrations_match_the_models(db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.store.models import Base

    engine = make_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_appending_checks_stored_keys_and_a_failed_import_leaves_nothing(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("\n".join(lines[:5]) + "\n")
    second.write_text("\n".join(lines[3:10]) + "\n")
    suite = str(EXAMPLES / "suite_v1.yaml")
    r = runner.invoke(cli, ["import", str(first), "--suite", suite, "--run", "r", "--keep-open", "--db", db_url])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["import", str(second), "--suite", suite, "--run", "r", "--db", db_url])
    assert r.exit_code == 2
    assert "2 bad lines, nothing stored" in r.stderr and "line 1: case" in r.stderr and "stored already" in r.stderr
    assert count(db_url, TrajectoryRow) == 5
    # a batch that fails half-way: the run this import created is removed again
    from app.store import ingest

    real = ingest.add_trajectories
    calls = {"n": 0}

    def flaky(*args: object, **kwargs: object) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk on fire")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "add_trajectories", flaky)
    r = runner.invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            suite,
            "--run",
            "new",
            "--batch",
            "10",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code != 0
    assert count(db_url, TrajectoryRow) == 5  # only the first import's rows


def test_sqlite_binds_none_and_bools_directly_and_stores_what_it_always_stored(tmp_path: Path) -> None:
    """``make_engine`` registers adapters so sqlite3 skips its adapter search for None
    and bools (``db.direct_sqlite_binding``); what lands in the file is unchanged:
    NULL, integers 1 and 0, and an int subclass that is no bool still as an integer."""
    import sqlite3

    engine = make_engine(f"sqlite:///{tmp_path / 'bind.db'}")
    assert sqlite3.adapters[(type(None), sqlite3.PrepareProtocol)](None) is None
    assert sqlite3.adapters[(bool, sqlite3.PrepareProtocol)](True) == 1

    class Flag(int):
        pass

    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (a, b, c, d, e)")
        conn.exec_driver_sql(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?)", [(None, True, False, Flag(7), "x"), (1.5, None, None, 2**62, None)]
        )
        rows = conn.exec_driver_sql(
            "SELECT typeof(a), a, typeof(b), b, typeof(c), c, typeof(d), d, typeof(e), e FROM t ORDER BY rowid"
        ).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [
        ("null", None, "integer", 1, "integer", 0, "integer", 7, "text", "x"),
        ("real", 1.5, "null", None, "null", None, "integer", 2**62, "null", None),
    ]
