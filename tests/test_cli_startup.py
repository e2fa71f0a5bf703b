"""`toollens` starts at once: the CLI module imports no database, web framework or SDK
(each command imports what it needs), suites are read with libyaml's loader, and
`score --fail-on-blocking` makes a CI check of a scored file with no database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from app.cli import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "openai", "anthropic", "mcp", "alembic", "jsonschema")


def test_importing_the_cli_loads_no_heavy_package() -> None:
    probe = f"import sys, app.cli\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_help_lists_the_commands_without_importing_them() -> None:
    probe = ("import sys\nfrom app.cli import main\nsys.argv = ['toollens', '--help']\ntry:\n    main()\n"
             f"except SystemExit:\n    pass\nprint([m for m in {HEAVY!r} + ('app.core',) if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "score" in done.stdout and "demo" in done.stdout and "gate" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_lint_defaults_are_the_cores_thresholds() -> None:
    from app.commands import lint as command
    from app.core import lint

    assert (command.SIMILAR_THRESHOLD, command.LOOKALIKE_THRESHOLD) == (lint.SIMILAR_THRESHOLD,
                                                                         lint.LOOKALIKE_THRESHOLD)


def test_suites_are_read_with_libyaml_when_pyyaml_has_it() -> None:
    from app.core import suite

    assert suite.SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    text = (EXAMPLES / "suite_v1.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=suite.SAFE_LOADER) == yaml.safe_load(text)


def test_fail_on_blocking_exits_1_naming_the_blocking_families() -> None:
    args = ["score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "trajectories_v1.jsonl")]
    assert CliRunner().invoke(cli, args).exit_code == 0  # without the flag: scored is success
    done = CliRunner().invoke(cli, [*args, "--json", "--fail-on-blocking"])
    assert done.exit_code == 1
    assert json.loads(done.stdout)["hallucinated_tools"] == {"num": 2, "den": 79}  # the report is still printed
    assert "blocking: hallucinated tools 2/79, hallucination after error 1/6 (must be zero)" in done.stderr


def test_fail_on_blocking_exits_0_when_both_blocking_families_are_zero(tmp_path: Path) -> None:
    # v2 calls no unknown tool (0/71); its one hallucination after an error is in a faulted trajectory
    lines = (EXAMPLES / "trajectories_v2.jsonl").read_text(encoding="utf-8").splitlines()
    clean = [line for line in lines if json.loads(line)["fault"] is None]
    assert 0 < len(clean) < len(lines)
    (tmp_path / "t.jsonl").write_text("\n".join(clean) + "\n", encoding="utf-8")
    done = CliRunner().invoke(cli, ["score", str(EXAMPLES / "suite_v2.yaml"), str(tmp_path / "t.jsonl"), "--json",
                                    "--fail-on-blocking"])
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["hallucinated_tools"]["num"] == 0 and data["hallucination_after_error"] == {"num": 0, "den": 0}
