"""The CLI's one error handler (``app.commands.common.CommandGroup``): what a person can act on
is one line and exit 2, whatever the command; a bug keeps its traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["lint", str(tmp_path / "missing.yaml")])
    assert done.exit_code == 2 and isinstance(done.exception, SystemExit)  # an exit, not a raised error
    assert done.output.count("error: ") == 1 and "Traceback" not in done.output
    assert "missing.yaml" in done.output


def test_an_unwritable_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    done = CliRunner().invoke(
        cli,
        [
            "convert",
            str(ROOT / "examples" / "trajectories_v1.jsonl"),
            "--from",
            "toollens",
            "--out",
            str(tmp_path / "a-file" / "suite"),
        ],
    )
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert done.output.startswith("error: ") and done.output.count("\n") == 1, done.output
    assert "a-file" in done.output


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr("app.core.advise.lint.load_lint_target", broken)
    done = CliRunner().invoke(cli, ["lint", str(ROOT / "examples" / "suite_v1.yaml")])
    assert isinstance(done.exception, RuntimeError) and str(done.exception) == "a bug"


def test_no_command_catches_toollens_errors_only_to_exit() -> None:
    """The handler is the one place: a command catches a ToolLensError only to say more than its text."""
    plain = re.compile(r"except ToolLensError as exc:\n\s+raise fail\(str\(exc\)\) from None")
    copies = [p.name for p in (ROOT / "app" / "commands").glob("*.py") if plain.search(p.read_text())]
    assert copies == []
    db_options = [
        p.name
        for p in (ROOT / "app" / "commands").glob("*.py")
        if '"--db"' in p.read_text() and p.name not in ("common.py", "help_pages.py")
    ]
    assert db_options == []
