"""`toollens import` with its scoring in a second process (app.store.pipeline):
the same rows, the same bad-line rules and the same failure handling as the
single-process path, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from app.cli import cli
from app.store import pipeline
from tests import test_store_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


@pytest.fixture
def pipelined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file import goes through the worker process, however small."""
    monkeypatch.setattr(pipeline, "PIPELINE_MIN_BYTES", 0)


def test_pipeline_is_used_only_for_files_worth_it(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text("{}\n")
    assert not pipeline.pipeline_pays(small)


@pytest.mark.usefixtures("pipelined")
def test_pipelined_import_then_export_gives_the_same_records(db_url: str, tmp_path: Path) -> None:
    test_store_cli.test_import_then_export_gives_the_same_records(db_url, tmp_path)


@pytest.mark.usefixtures("pipelined")
def test_pipelined_bad_lines_store_nothing_unless_skipped(db_url: str, tmp_path: Path) -> None:
    test_store_cli.test_bad_lines_store_nothing_unless_skipped(db_url, tmp_path)


@pytest.mark.usefixtures("pipelined")
def test_pipelined_appending_and_a_failed_batch(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    test_store_cli.test_appending_checks_stored_keys_and_a_failed_import_leaves_nothing(db_url, tmp_path, monkeypatch)


def _rows(url: str, run: str) -> dict[str, list[tuple[object, ...]]]:
    """A run's stored rows without their ids (which differ from run to run)."""
    engine = create_engine(url)
    out = {}
    with engine.connect() as conn:
        rid = conn.execute(text("SELECT id FROM runs WHERE name = :n"), {"n": run}).scalar_one()
        out["trajectories"] = [tuple(r) for r in conn.execute(text(
            "SELECT case_id, trial, fault_key, outcome, passed, failures, detail, n_calls FROM trajectories "
            "WHERE run_id = :r ORDER BY id"), {"r": rid})]
        out["calls"] = [tuple(r) for r in conn.execute(text(
            "SELECT idx, name, arguments, arguments_raw, observation, error_kind, \"exists\", schema_field, step, "
            "expected_name, selection_ok, mismatches, dependency_before, forbidden, reaction, reaction_ok "
            "FROM calls WHERE run_id = :r ORDER BY id"), {"r": rid})]
        out["tags"] = sorted(tuple(r) for r in conn.execute(text(
            "SELECT t.case_id, t.trial, g.kind, g.value FROM trajectory_tags g JOIN trajectories t "
            "ON t.id = g.trajectory_id WHERE g.run_id = :r"), {"r": rid}))
        out["counters"] = sorted(tuple(r) for r in conn.execute(text(
            "SELECT kind, a, b, c, value FROM run_counters WHERE run_id = :r"), {"r": rid}))
    engine.dispose()
    return out


def test_pipelined_and_single_process_imports_store_the_same_rows(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src, suite = EXAMPLES / "trajectories_v2.jsonl", EXAMPLES / "suite_v2.yaml"
    r = runner.invoke(cli, ["import", str(src), "--suite", str(suite), "--run", "one", "--batch", "5", "--db", db_url])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(pipeline, "PIPELINE_MIN_BYTES", 0)
    r = runner.invoke(cli, ["import", str(src), "--suite", str(suite), "--run", "two", "--batch", "5", "--db", db_url])
    assert r.exit_code == 0, r.output
    one, two = _rows(db_url, "one"), _rows(db_url, "two")
    assert one["trajectories"] and one["calls"] and one["counters"]
    assert one == two
