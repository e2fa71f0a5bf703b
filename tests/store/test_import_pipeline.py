"""`toollens import` with its scoring in a second process (app.store.scoring_worker):
the same rows, the same bad-line rules and the same failure handling as the
single-process path, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from app.cli import cli
from app.store import scoring_worker as pipeline
from tests.store import test_store_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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
        out["trajectories"] = [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT case_id, trial, fault_key, outcome, passed, failures, detail, n_calls FROM trajectories "
                    "WHERE run_id = :r ORDER BY id"
                ),
                {"r": rid},
            )
        ]
        out["calls"] = [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT idx, name, arguments, arguments_raw, observation, error_kind, "
                    '"exists", schema_field, step, '
                    "expected_name, selection_ok, mismatches, dependency_before, forbidden, reaction, reaction_ok "
                    "FROM calls WHERE run_id = :r ORDER BY id"
                ),
                {"r": rid},
            )
        ]
        out["tags"] = sorted(
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT t.case_id, t.trial, g.kind, g.value FROM trajectory_tags g JOIN trajectories t "
                    "ON t.id = g.trajectory_id WHERE g.run_id = :r"
                ),
                {"r": rid},
            )
        )
        out["counters"] = sorted(
            tuple(r)
            for r in conn.execute(text("SELECT kind, a, b, c, value FROM run_counters WHERE run_id = :r"), {"r": rid})
        )
    engine.dispose()
    return out


def test_pipelined_and_single_process_imports_store_the_same_rows(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src, suite = EXAMPLES / "trajectories_v2.jsonl", EXAMPLES / "suite_v2.yaml"
    r = runner.invoke(cli, ["import", str(src), "--suite", str(suite), "--run", "one", "--batch", "5", "--db", db_url])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(pipeline, "PIPELINE_MIN_BYTES", 0)
    r = runner.invoke(cli, ["import", str(src), "--suite", str(suite), "--run", "two", "--batch", "5", "--db", db_url])
    assert r.exit_code == 0, r.output
    one, two = _rows(db_url, "one"), _rows(db_url, "two")
    assert one["trajectories"] and one["calls"] and one["counters"]
    assert one == two


@pytest.mark.usefixtures("pipelined")
def test_a_new_run_checked_while_stored_is_removed_when_a_late_line_is_bad(db_url: str, tmp_path: Path) -> None:
    """A new run is checked by the worker while its batches are stored: a bad line after
    several stored batches removes the run again, and the refusal names every bad line."""
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    src = tmp_path / "late.jsonl"
    src.write_text("\n".join([*lines, "{truncated", lines[3]]) + "\n")
    args = [
        "import",
        str(src),
        "--suite",
        str(EXAMPLES / "suite_v1.yaml"),
        "--run",
        "late",
        "--batch",
        "5",
        "--db",
        db_url,
    ]
    r = runner.invoke(cli, args)
    assert r.exit_code == 2
    n = len(lines)
    assert (
        f"2 bad lines, nothing stored (--skip-bad stores the rest): line {n + 1}: not valid JSON" in r.stderr
        and f"line {n + 2}: same case, trial and fault as line 4" in r.stderr
    )
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == 0
        for table in ("trajectories", "calls", "trajectory_tags", "run_counters"):
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0, table
    engine.dispose()
    r = runner.invoke(cli, [*args, "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert f"stored {n} trajectories" in r.stderr and f"skipped {src}:{n + 1}: not valid JSON" in r.stderr


@pytest.mark.usefixtures("pipelined")
def test_a_run_created_by_another_writer_during_a_checked_later_import_is_not_touched(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, suite = EXAMPLES / "trajectories_v1.jsonl", str(EXAMPLES / "suite_v1.yaml")
    real = pipeline.ScoringPipeline.__init__
    raced: list[bool] = []

    def meanwhile(self: pipeline.ScoringPipeline, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        if raced:  # the other writer's own import
            return
        raced.append(True)
        r = runner.invoke(
            cli,
            [
                "import",
                str(EXAMPLES / "trajectories_v2.jsonl"),
                "--suite",
                str(EXAMPLES / "suite_v2.yaml"),
                "--run",
                "race",
                "--keep-open",
                "--db",
                db_url,
            ],
        )
        assert r.exit_code == 0, r.output

    monkeypatch.setattr(pipeline.ScoringPipeline, "__init__", meanwhile)
    r = runner.invoke(cli, ["import", str(src), "--suite", suite, "--run", "race", "--db", db_url])
    assert r.exit_code != 0
    assert "was created by another writer during this import" in r.stderr
    v2 = len((EXAMPLES / "trajectories_v2.jsonl").read_text().splitlines())
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one() == v2
        assert conn.execute(text("SELECT status FROM runs WHERE name = 'race'")).scalar_one() == "running"
    engine.dispose()


@pytest.mark.usefixtures("pipelined")
def test_nothing_of_a_file_is_visible_until_all_of_it_is_stored(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches stored so far are in the import's one transaction: another connection sees
    neither the run nor any of its trajectories until the end; a bad line at the end rolls
    all of it back."""
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    src, bad = tmp_path / "all.jsonl", tmp_path / "bad_end.jsonl"
    src.write_text("\n".join(lines[:20]) + "\n")
    bad.write_text("\n".join([*lines[:20], "{truncated"]) + "\n")
    suite = str(EXAMPLES / "suite_v1.yaml")
    real = pipeline.ScoringPipeline.batches
    engine = create_engine(db_url)
    seen: list[tuple[int, int]] = []

    def look(self: pipeline.ScoringPipeline, skip: set[int] | None = None) -> Any:
        for n, item in enumerate(real(self, skip)):
            yield item
            if n == 1:  # two batches stored: what another connection sees meanwhile
                with engine.connect() as conn:
                    seen.append(
                        (
                            conn.execute(text("SELECT count(*) FROM runs")).scalar_one(),
                            conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one(),
                        )
                    )

    monkeypatch.setattr(pipeline.ScoringPipeline, "batches", look)
    r = runner.invoke(cli, ["import", str(bad), "--suite", suite, "--run", "all", "--batch", "5", "--db", db_url])
    assert r.exit_code == 2 and "1 bad lines, nothing stored" in r.stderr
    r = runner.invoke(cli, ["import", str(src), "--suite", suite, "--run", "all", "--batch", "5", "--db", db_url])
    assert r.exit_code == 0, r.output
    assert seen == [(0, 0), (0, 0)]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one() == 20
        assert conn.execute(text("SELECT status FROM runs WHERE name = 'all'")).scalar_one() == "finished"
    engine.dispose()
