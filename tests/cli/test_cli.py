"""`toollens score` through its runner: the JSON contract, the readable report, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from tests.factories import BANKING_TOOLS, FAIL_SALDO, OK_CLIENTE, OK_SALDO, SALDO_CASE, call

runner = CliRunner()

SPEC_KEYS = {
    "selection_precision",
    "selection_recall",
    "schema_validity",
    "argument_accuracy",
    "hallucinated_tools",
    "recovery",
    "hallucination_after_error",
    "dependency_violations",
    "confusion",
    "outcomes",
    "pass_hat_k",
    "cases",
}


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "name": "banca",
                "toolset": BANKING_TOOLS,
                "cases": [SALDO_CASE],
                "dependencies": [["buscar_cliente", "ver_saldo"]],
            },
            allow_unicode=True,
        )
    )
    lines = [
        {
            "case_id": "saldo-001",
            "trial": 0,
            "question": "q",
            "calls": [OK_CLIENTE, OK_SALDO],
            "answer": "Tu saldo es $142.900",
            "fault": None,
        },
        {
            "case_id": "saldo-001",
            "trial": 1,
            "question": "q",
            "calls": [OK_SALDO, call("[bold]boom[/bold]")],
            "answer": "ok",
            "fault": None,
        },
        {
            "case_id": "saldo-001",
            "trial": 0,
            "question": "q",
            "calls": [OK_CLIENTE, FAIL_SALDO],
            "answer": "Tu saldo es $142.900",
            "fault": {"step": 1, "kind": "http_503"},
        },
    ]
    traj = tmp_path / "t.jsonl"
    traj.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    return suite, traj


def test_json_output_is_the_spec_object(files: tuple[Path, Path]) -> None:
    result = runner.invoke(cli, ["score", str(files[0]), str(files[1]), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= SPEC_KEYS
    assert data["hallucinated_tools"] == {"num": 1, "den": 6}
    # the pair applies where ver_saldo succeeded: not in the third, whose ver_saldo met a 503
    assert data["dependency_violations"] == [
        {"before": "buscar_cliente", "after": "ver_saldo", "count": 1, "checked": 2}
    ]
    assert data["outcomes"] == {"recovered": 0, "gave_up": 0, "hallucinated": 1, "confused": 0}
    assert {"expected": "buscar_cliente", "called": "ver_saldo", "count": 1, "hallucinated": False} in data["confusion"]
    assert data["cases"][1] == {
        "case_id": "saldo-001",
        "trial": 1,
        "passed": False,
        "failures": ["selection", "hallucinated_tool", "dependency"],
        "fault": None,
        "outcome": None,
    }


def test_readable_report_shows_families_and_escapes_names(files: tuple[Path, Path]) -> None:
    result = runner.invoke(cli, ["score", str(files[0]), str(files[1])], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    for label in (
        "precision",
        "recall",
        "schema validity",
        "argument accuracy",
        "hallucinated tools",
        "recovery",
        "hallucination after error",
        "dependency violations",
    ):
        assert label in out
    assert "1 / 6" in out and "BLOCKING" in out
    assert "[bold]boom[/bold]" in out  # shown literally, not as markup
    assert "buscar_cliente" in out and "Failing cases (2 of 3)" in out


def test_missing_files_and_bad_lines_exit_2_with_a_clear_message(files: tuple[Path, Path], tmp_path: Path) -> None:
    result = runner.invoke(cli, ["score", str(tmp_path / "nope.yaml"), str(files[1])])
    assert result.exit_code == 2
    assert "nope.yaml: file not found" in result.stderr
    result = runner.invoke(cli, ["score", str(files[0]), str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2 and "nope.jsonl: file not found" in result.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(files[1].read_text() + '{"case_id": "x", "calls": "no"}\n')
    result = runner.invoke(cli, ["score", str(files[0]), str(bad), "--json"])
    assert result.exit_code == 2
    assert f"{bad}:4: calls: must be a list" in result.stderr
    assert "Traceback" not in result.output


def test_console_script_is_installed(files: tuple[Path, Path]) -> None:
    exe = Path(sys.executable).with_name("toollens")
    proc = subprocess.run(
        [str(exe), "score", str(files[0]), str(files[1]), "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(proc.stdout)["schema_validity"] == {"num": 5, "den": 5}


def test_terminal_escape_sequences_are_shown_not_sent(files: tuple[Path, Path], tmp_path: Path) -> None:
    evil = tmp_path / "evil.jsonl"
    records = [
        {"case_id": "x\u001b[2J\u001b]0;pwned\u0007", "calls": [call("nope")], "answer": ""},
        {"case_id": "saldo-001", "calls": [call("\u001b[31mboom")], "answer": ""},
    ]
    evil.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = runner.invoke(cli, ["score", str(files[0]), str(evil), "--lenient"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "\u001b[2J" not in result.output and "\u001b]0;" not in result.output
    assert "\\x1b[31mboom" in result.stdout
    assert "1 of 2 records are of cases the suite lacks ('x\\x1b[2J\\x1b]0;pwned\\x07')" in result.stderr
