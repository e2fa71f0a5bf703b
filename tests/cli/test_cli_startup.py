"""`toollens` starts at once: the CLI module imports no database, web framework or SDK
(each command imports what it needs), `toollens score` runs without typer, pydantic or
jsonschema (the console script reads its plain forms itself), suites are read with libyaml's
loader, and `score --fail-on-blocking` makes a CI check of a scored file with no database."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tomllib
import typing
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.commands import help_text
from app.commands import score as score_command
from app.commands import score_command as typer_score

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "openai", "anthropic", "mcp", "alembic", "jsonschema")


def test_importing_the_cli_loads_no_heavy_package() -> None:
    probe = f"import sys, app.cli\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_help_lists_the_commands_without_importing_them() -> None:
    probe = (
        "import sys\nfrom app.cli import main\nsys.argv = ['toollens', '--help']\ntry:\n    main()\n"
        f"except SystemExit:\n    pass\nprint([m for m in {HEAVY!r} + ('app.core',) if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "score" in done.stdout and "demo" in done.stdout and "gate" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


CONSOLE_SCRIPT = [
    sys.executable,
    "-c",
    "import sys\nfrom app.entry import main\nsys.argv[0] = 'toollens'\n"
    "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\nelse:\n    code = 0\n"
    "import json\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    "sys.exit(code)",
]
SCORE_V2 = ["score", str(EXAMPLES / "suite_v2.yaml"), str(EXAMPLES / "trajectories_v2.jsonl")]


def _loaded_by(args: list[str]) -> set[str]:
    """The top-level packages loaded by the console script running ``toollens ARGS``."""
    done = subprocess.run([*CONSOLE_SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_the_console_script_is_the_light_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"]["toollens"] == "app.entry:main"


def test_score_loads_no_cli_framework_validator_or_database() -> None:
    # what made `toollens score` take 0.4 s: typer reads arguments with pydantic, jsonschema checks schemas
    heavy = {"typer", "click", "pydantic", "jsonschema", "sqlalchemy", "fastapi", "asyncio", *HEAVY}
    as_json = _loaded_by([*SCORE_V2, "--json"])
    assert {"app", "yaml", "orjson"} <= as_json
    assert as_json & (heavy | {"rich"}) == set()
    assert _loaded_by(SCORE_V2) & heavy == set()  # the tables are rich's


def test_help_is_printed_without_typer_and_the_rest_goes_through_it() -> None:
    for args in (
        ["--help"],
        ["score", "--help"],
        ["db", "upgrade", "--help"],
        ["toolset", "--help"],
        ["demo", "--help"],
    ):
        assert _loaded_by(args) & {"typer", "click", "rich", "pydantic"} == set(), args
    assert "typer" in _loaded_by(["score", "--json", "--help"])  # not a command's name before --help


def test_the_help_rendered_in_advance_is_typers() -> None:
    pages = help_text.render_all()
    assert pages == help_text.HELP, "a command or its help changed: python -m app.commands.help_text"
    assert len(pages) == 22 and pages["db upgrade"].startswith("Usage: toollens db upgrade")
    assert pages["db backfill"].startswith("Usage: toollens db backfill")
    assert help_text.ROOT_HELP == pages[""] == help_text.render()


@pytest.mark.parametrize(
    ("columns", "args"),
    [
        ("80", ["--help"]),
        ("79", ["--help"]),
        ("200", ["--help"]),
        ("80", ["score", "--help"]),
        ("79", ["score", "--help"]),
        ("120", ["db", "upgrade", "--help"]),
        ("80", ["import", "--help"]),
        ("100", ["demo", "--help"]),
    ],
)
def test_the_console_script_prints_typers_help(columns: str, args: list[str]) -> None:
    env = {**os.environ, "COLUMNS": columns}
    probe = "import sys\nsys.argv[0] = 'toollens'\nfrom {} import main\nmain()"
    quick, full = (
        subprocess.run(
            [sys.executable, "-c", probe.format(module), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )
        for module in ("app.entry", "app.cli")
    )
    assert (
        (quick.returncode, quick.stdout, quick.stderr)
        == (full.returncode, full.stdout, full.stderr)
        == (0, quick.stdout, "")
    )
    assert quick.stdout.startswith(f"Usage: toollens {' '.join(args[:-1])}".rstrip() + " [OPTIONS]")
    kept = help_text.HELP.get(" ".join(args[:-1]))
    if columns != "79":
        assert quick.stdout == kept
    if args == ["--help"]:
        assert (quick.stdout == help_text.ROOT_HELP) is (columns != "79")  # narrower: typer wraps it


def _typer_reads(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the typer command passes to ``run`` for ``toollens score ARGV``, defaults filled in."""
    seen: list[dict[str, Any]] = []
    signature = inspect.signature(score_command.run)

    def run(*args: Any, **kwargs: Any) -> int:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        seen.append(dict(bound.arguments))
        return 0

    monkeypatch.setattr(score_command, "run", run)
    assert CliRunner().invoke(cli, ["score", *argv]).exit_code == 0
    return seen[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["s.yaml", "t.jsonl"],
        ["s.yaml", "t.jsonl", "--json"],
        ["--json", "s.yaml", "t.jsonl"],
        ["s.yaml", "--top", "3", "t.jsonl"],
        ["s.yaml", "t.jsonl", "--top=007"],
        ["--fail-on-blocking", "s.yaml", "--json", "t.jsonl", "--top", "0"],
        ["s.yaml", "t.jsonl", "--prices", "p.yaml"],
        ["--prices=p.yaml", "s.yaml", "t.jsonl"],
        ["out"],
        ["--json", "out"],
        ["out/", "--top", "3"],  # a folder `convert` wrote
    ],
)
def test_score_reads_the_plain_forms_as_the_typer_command_does(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = score_command.parse(argv)
    assert parsed is not None
    bound = inspect.signature(score_command.run).bind(**parsed)
    bound.apply_defaults()
    assert bound.arguments == _typer_reads(argv, monkeypatch)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["s.yaml", "t.jsonl", "u.jsonl"],
        ["--help"],
        ["s.yaml", "t.jsonl", "--top", "x"],
        ["s.yaml", "t.jsonl", "--top", "-1"],
        ["s.yaml", "t.jsonl", "--top"],
        ["s.yaml", "t.jsonl", "--js"],
        ["s.yaml", "t.jsonl", "--json=1"],
        ["--", "s.yaml", "t.jsonl"],
        ["s.yaml", "t.jsonl", "--top", "2", "--top", "3"],
        ["-", "t.jsonl"],
        ["", "t.jsonl"],
        ["s.yaml", "t.jsonl", "--prices"],
        ["s.yaml", "t.jsonl", "--prices", "--json"],
    ],
)
def test_score_leaves_everything_else_to_typer(argv: list[str]) -> None:
    assert score_command.parse(argv) is None


def test_the_quick_option_table_is_the_typer_commands() -> None:
    command = typer.main.get_command(cli).commands["score"]  # type: ignore[attr-defined]
    options = [p for p in command.params if p.param_type_name == "option"]
    hints = typing.get_type_hints(typer_score.score)  # what each option's value is read as
    assert {
        p.opts[0]: (p.name, None if p.is_flag else "int" if hints[p.name] is int else "path") for p in options
    } == score_command.OPTIONS
    assert hints["prices"] == Path | None
    defaults = {
        name: p.default
        for name, p in inspect.signature(score_command.run).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    assert defaults == {p.name: p.default for p in options}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "trajectories_v1.jsonl")], 0),
        (
            [
                "score",
                str(EXAMPLES / "suite_v1.yaml"),
                str(EXAMPLES / "trajectories_v1.jsonl"),
                "--json",
                "--fail-on-blocking",
            ],
            1,
        ),
        (["score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "nothing.jsonl")], 2),
    ],
)
def test_the_console_script_prints_what_the_typer_command_prints(args: list[str], code: int) -> None:
    quick, full = (
        subprocess.run([*prefix, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
        for prefix in ([sys.executable, "-m", "app.entry"], [sys.executable, "-m", "app.cli"])
    )
    assert (quick.returncode, quick.stdout, quick.stderr) == (full.returncode, full.stdout, full.stderr)
    assert quick.returncode == code
    assert {0: "F3 hallucinated", 1: '"hallucinated_tools": {"num": 2, "den": 79}', 2: ""}[code] in quick.stdout
    assert {
        0: "",
        1: "blocking: hallucinated tools 2/79, hallucination after error 3/13 (must be zero)\n",
        2: f"error: {EXAMPLES / 'nothing.jsonl'}: file not found\n",
    }[code] == quick.stderr


def test_the_cores_names_are_imported_on_first_use() -> None:
    probe = (
        "import sys\nimport app.core\nprint('app.core.run.runner' in sys.modules)\nfrom app.core import run_case\n"
        "print(run_case.__module__, 'app.core.run.runner' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.split() == ["False", "app.core.run.runner", "True"], done.stderr
    import app.core

    assert sorted(app.core._MODULE_OF) == sorted(app.core.__all__)
    for name in app.core.__all__:
        module = import_module(f"app.core.{app.core._MODULE_OF[name]}")
        assert getattr(app.core, name) is getattr(module, name)


def test_lint_defaults_are_the_cores_thresholds() -> None:
    from app.commands import lint as command
    from app.core.advise import lint

    assert (command.SIMILAR_THRESHOLD, command.LOOKALIKE_THRESHOLD) == (
        lint.SIMILAR_THRESHOLD,
        lint.LOOKALIKE_THRESHOLD,
    )


def test_suites_are_read_with_libyaml_when_pyyaml_has_it() -> None:
    from app.core.suites import suite

    assert suite.SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    text = (EXAMPLES / "suite_v1.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=suite.SAFE_LOADER) == yaml.safe_load(text)


def test_fail_on_blocking_exits_1_naming_the_blocking_families() -> None:
    args = ["score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "trajectories_v1.jsonl")]
    assert CliRunner().invoke(cli, args).exit_code == 0  # without the flag: scored is success
    done = CliRunner().invoke(cli, [*args, "--json", "--fail-on-blocking"])
    assert done.exit_code == 1
    assert json.loads(done.stdout)["hallucinated_tools"] == {"num": 2, "den": 79}  # the report is still printed
    assert "blocking: hallucinated tools 2/79, hallucination after error 3/13 (must be zero)" in done.stderr


def test_fail_on_blocking_exits_0_when_both_blocking_families_are_zero(tmp_path: Path) -> None:
    # v2 calls no unknown tool (0/71); its one hallucination after an error is in a faulted trajectory
    lines = (EXAMPLES / "trajectories_v2.jsonl").read_text(encoding="utf-8").splitlines()
    clean = [line for line in lines if json.loads(line)["fault"] is None]
    assert 0 < len(clean) < len(lines)
    (tmp_path / "t.jsonl").write_text("\n".join(clean) + "\n", encoding="utf-8")
    done = CliRunner().invoke(
        cli, ["score", str(EXAMPLES / "suite_v2.yaml"), str(tmp_path / "t.jsonl"), "--json", "--fail-on-blocking"]
    )
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    # every tool error is a recovery case now: one unfaulted trajectory met one (a schema refusal) and invented nothing
    assert data["hallucinated_tools"]["num"] == 0 and data["hallucination_after_error"] == {"num": 0, "den": 1}
