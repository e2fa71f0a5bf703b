"""A newcomer's mistakes in a suite are named before anything runs, by `lint`, `run`, `score`
and the API alike (file, line, case, field, and the nearest known name), never scored as the
agent's; `--lenient` makes them warnings for imported suites. Records of cases the suite lacks
are an error, or with `--lenient` left out of every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.core.suites.suite import Case, Suite
from app.core.suites.suite_check import CASE_KEYS, SUITE_KEYS
from app.settings import Settings
from app.web.app import create_app
from tests.resources import DATA, shared_data

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
TOOLLENS = [sys.executable, "-c", "from app.entry import main; main()"]  # the console script, fast path included

TOOLSET = """\
toolset:
  tools:
    - name: get_forecast
      description: Forecast for a city, for the next days (integer, 1 to 7).
      parameters:
        type: object
        properties:
          city: {type: string}
          days: {type: integer}
          units: {type: string, enum: [metric, imperial]}
          date: {type: string, format: date}
        required: [city]
    - name: get_alerts
      description: Weather alerts of a city.
      parameters: {type: object, properties: {city: {type: string}}, required: [city]}
"""

# the four mistakes of the issue: a misspelt key, a tool the toolset lacks, an argument the
# tool's own schema rejects, a misspelt mock key (the mapping would be a fixed response)
MISTAKES = (
    "name: weather\n"
    + TOOLSET
    + """\
cases:
  - id: w-001
    question: Weather in Paris for 3 days?
    expectedcalls:
      - name: get_forecast
        arguments: {city: Paris, days: 3}
  - id: w-002
    question: Weather in Rome?
    expected_calls:
      - name: get_forcast
        arguments: {city: Rome}
  - id: w-003
    question: Weather in Oslo for 3 days?
    expected_calls:
      - name: get_forecast
        arguments: {city: Oslo, days: "3"}
    mocks:
      get_forecast: {respones: [{when: {city: Oslo}, response: sunny}]}
"""
)

EXPECTED = [
    "suite.yaml:20: case 'w-001': expectedcalls: unknown key, did you mean expected_calls?",
    "suite.yaml:26: case 'w-002': expected_calls[0].name: expected call: no tool 'get_forcast' in the toolset, "
    "did you mean get_forecast?",
    "suite.yaml:32: case 'w-003': expected_calls[0].arguments.days: get_forecast's schema rejects it: "
    "field 'days': expected integer, got string '3'",
    "suite.yaml:34: case 'w-003': mocks.get_forecast.respones: did you mean responses? As written, the whole "
    "mapping is the tool's fixed response",
]


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(MISTAKES, encoding="utf-8")
    return path


def console(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOOLLENS, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "300"},
    )


def errors(stderr: str) -> list[str]:
    return [line.removeprefix("error: ") for line in stderr.splitlines() if line.startswith("error: ")]


def test_the_file_lists_the_lines_it_points_at(suite: Path) -> None:
    lines = suite.read_text().splitlines()
    assert lines[19].strip() == "expectedcalls:" and "get_forcast" in lines[25]
    assert 'days: "3"' in lines[31] and "respones" in lines[33]


def test_score_names_every_mistake_and_scores_nothing(suite: Path) -> None:
    (suite.parent / "t.jsonl").write_text(json.dumps({"case_id": "w-001", "calls": [], "answer": "ok"}) + "\n")
    done = console(["score", "suite.yaml", "t.jsonl", "--json"], suite.parent)  # the fast path
    assert done.returncode == 2 and done.stdout == ""
    assert errors(done.stderr) == [
        *EXPECTED,
        "4 mistakes in the suite: nothing was scored (--lenient makes these warnings, for imported suites)",
    ]
    typer_way = runner.invoke(cli, ["score", str(suite), str(suite.parent / "t.jsonl")], env={"COLUMNS": "300"})
    assert typer_way.exit_code == 2
    assert [line.split("suite.yaml:", 1)[-1] for line in errors(typer_way.stderr)][:4] == [
        e.split("suite.yaml:", 1)[1] for e in EXPECTED
    ]


def test_lint_and_run_name_the_same_mistakes_before_anything_runs(suite: Path) -> None:
    linted = console(["lint", "suite.yaml"], suite.parent)
    assert linted.returncode == 2 and errors(linted.stderr)[:4] == EXPECTED
    assert errors(linted.stderr)[4].endswith("nothing was linted (--lenient makes these warnings, for imported suites)")
    db = suite.parent / "runs.db"
    ran = console(["run", "suite.yaml", "--db", str(db), "--faults", "tool:get_alert=timeout"], suite.parent)
    assert ran.returncode == 2 and errors(ran.stderr)[:4] == EXPECTED
    assert (
        errors(ran.stderr)[4] == "--faults: tool:get_alert: no tool 'get_alert' in the toolset, did you mean "
        "get_alerts?"
    )
    assert not db.exists()  # nothing ran, nothing was stored


def test_lenient_makes_them_warnings_and_goes_on(suite: Path) -> None:
    (suite.parent / "t.jsonl").write_text(json.dumps({"case_id": "w-001", "calls": [], "answer": "ok"}) + "\n")
    done = console(["score", "suite.yaml", "t.jsonl", "--json", "--lenient"], suite.parent)
    assert done.returncode == 0, done.stderr
    warned = [line.removeprefix("warning: ") for line in done.stderr.splitlines()]
    assert warned == EXPECTED
    report = json.loads(done.stdout)
    # the misspelt key is ignored as it always was: w-001 expects no call, and passes with none
    assert [(c["case_id"], c["passed"]) for c in report["cases"]] == [("w-001", True)]


def test_a_mock_of_a_tool_that_does_not_exist_is_an_error_even_when_lenient(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: s\n"
        + TOOLSET
        + """\
cases:
  - id: a
    question: q
    expected_calls: [get_alerts]
    mocks: {get_alert: {response: none}}
  - id: a
    question: again
"""
    )
    done = console(["lint", "s.yaml", "--lenient"], tmp_path)
    assert done.returncode == 2
    assert errors(done.stderr) == [
        "s.yaml:21: case 'a': mocks.get_alert: mock: no tool 'get_alert' in the toolset, did you mean get_alerts?",
        "s.yaml:22: case 'a': id: duplicate case id",
        "2 mistakes in the suite: nothing was linted",
    ]


def test_unknown_keys_at_every_level_and_what_stays_free(tmp_path: Path) -> None:
    (tmp_path / "tools.yaml").write_text("""\
name: shop
x-owner: the shop team
tools:
  - name: find_order
    description: Find an order by its number.
    paramaters: {type: object, properties: {number: {type: string}}}
    mock: {responses: [{when: {number: A1}, response: found, delay: 3}], default: nothing}
""")
    (tmp_path / "s.yaml").write_text("""\
name: shop
toolset: tools.yaml
give_up_phrase: [sorry]
cases:
  - id: c1
    turns:
      - user: Where is A1?
        expected_call: [find_order]
  - id: c2
    question: Where is my order?
    user: {instructions: a customer, known: {number: A1}}
    expected_calls:
      - name: find_order
        arguments: {number: A1}
        tolerance: {number: {rule: regex, patern: "A\\\\d"}}
    forbidden_calls: [cancel_order]
    mocks: {find_order: {note: "a fixed response may hold any key"}}
""")
    done = console(["lint", "s.yaml"], tmp_path)
    assert done.returncode == 2
    assert errors(done.stderr) == [
        "s.yaml:3: give_up_phrase: unknown key, did you mean give_up_phrases?",
        "s.yaml:8: case 'c1': turns[0].expected_call: unknown key, did you mean expected_calls?",
        "s.yaml:11: case 'c2': user.instructions: unknown key, did you mean instruction?",
        "s.yaml:11: case 'c2': user.instruction: required, a non-empty string (who the user is and what they want)",
        "s.yaml:15: case 'c2': expected_calls[0].tolerance.number.patern: unknown key, did you mean pattern?",
        "s.yaml:16: case 'c2': forbidden_calls[0]: forbidden call: no tool 'cancel_order' in the toolset",
        "tools.yaml:6: tools[0].paramaters: unknown key, did you mean parameters?",
        "tools.yaml:7: tools[0].mock.responses[0].delay: unknown key (known: arguments, response, when)",
        "8 mistakes in the suite: nothing was linted (--lenient makes these warnings, for imported suites)",
    ]


def test_what_a_tolerance_rule_forgives_is_no_mistake(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: s\n"
        + TOOLSET
        + """\
cases:
  - id: loose
    question: q
    expected_calls:
      - name: get_forecast
        arguments: {city: " Paris ", days: 3.0, units: Metric, date: "March 5, 2024"}
        tolerance: {date: date}
      - name: get_forecast
        arguments: {city: Rome, days: "three", units: kelvin}
        tolerance: {days: {one_of: [3, "three"]}, units: ignore}
  - id: wrong
    question: q
    expected_calls:
      - name: get_forecast
        arguments: {city: Oslo, dayz: 2, date: "March 5, 2024"}
"""
    )
    done = console(["lint", "s.yaml"], tmp_path)
    assert errors(done.stderr) == [
        "s.yaml:31: case 'wrong': expected_calls[0].arguments.dayz: get_forecast has no parameter 'dayz', did you "
        "mean days?",
        "s.yaml:31: case 'wrong': expected_calls[0].arguments.date: get_forecast's schema rejects it: field 'date': "
        "expected a date YYYY-MM-DD, got 'March 5, 2024'",
        "2 mistakes in the suite: nothing was linted (--lenient makes these warnings, for imported suites)",
    ]


def test_the_known_keys_are_the_models_fields() -> None:
    assert {f.name for f in fields(Suite)} - {"path"} == SUITE_KEYS
    assert {f.name for f in fields(Case)} | {"source", "notes"} == CASE_KEYS


# -- trajectories of cases the suite lacks -----------------------------------------------------


GOOD = (
    "name: s\n"
    + TOOLSET
    + """\
cases:
  - id: w-001
    question: Weather in Paris?
    expected_calls: [{name: get_forecast, arguments: {city: Paris}}]
"""
)


def record(case_id: str, tool: str = "get_forecast", trial: int = 0) -> str:
    call = {"name": tool, "arguments": {"city": "Paris"}, "observation": "sunny", "error": None}
    return json.dumps({"case_id": case_id, "trial": trial, "calls": [call], "answer": "sunny"}) + "\n"


def test_records_of_unknown_cases_are_an_error_naming_them(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    (tmp_path / "t.jsonl").write_text(record("w-001") + record("w-01") + record("w-01", trial=1) + record("x"))
    done = console(["score", "s.yaml", "t.jsonl", "--json"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert errors(done.stderr) == [
        "t.jsonl: 3 of 4 records are of cases the suite lacks ('w-01', 'x'): nothing "
        "was scored (--lenient scores the rest)"
    ]


def test_lenient_leaves_them_out_of_every_figure(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    # w-001 passes in trial 0 and fails in trial 1 (wrong tool); the unknown case's calls would count
    (tmp_path / "t.jsonl").write_text(
        record("w-001") + record("w-001", "get_alerts", trial=1) + record("nope", "invented_tool")
    )
    done = console(["score", "s.yaml", "t.jsonl", "--json", "--lenient"], tmp_path)
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "warning: t.jsonl: 1 of 3 records are of cases the suite lacks ('nope'): left out of every figure"
    ]
    report = json.loads(done.stdout)
    assert report["trajectories"] == 2 and [c["case_id"] for c in report["cases"]] == ["w-001", "w-001"]
    assert report["hallucinated_tools"] == {"num": 0, "den": 2}  # invented_tool was the unknown record's
    assert report["pass_hat_k"] == {"1": 0.5, "2": 0.0}


def test_a_file_that_matches_nothing_never_passes(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    (tmp_path / "typo.jsonl").write_text(record("W-001") + record("w_001"))
    for extra in ([], ["--lenient"]):
        done = console(["score", "s.yaml", "typo.jsonl", "--json", *extra], tmp_path)
        assert done.returncode == 2 and '"passed": true' not in done.stdout
        assert errors(done.stderr) == [
            "typo.jsonl: 2 of 2 records are of cases the suite lacks ('W-001', 'w_001'):"
            " nothing to score (is it the right suite?)"
        ]


# -- the API -------------------------------------------------------------------------------------


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def inline(text: str) -> dict[str, Any]:
    import yaml

    document: dict[str, Any] = yaml.safe_load(text)
    return document


def test_the_api_refuses_an_inline_suite_naming_every_mistake(client: TestClient) -> None:
    answer = client.post("/api/runs", json={"name": "r1", "suite": inline(MISTAKES)})
    assert answer.status_code == 422
    body = answer.json()
    assert body["error"] == "4 mistakes in suite"
    assert [(d["field"], d["message"]) for d in body["detail"]] == [
        ("expectedcalls", "suite: case 'w-001': expectedcalls: unknown key, did you mean expected_calls?"),
        (
            "expected_calls[0].name",
            "suite: case 'w-002': expected_calls[0].name: expected call: no tool "
            "'get_forcast' in the toolset, did you mean get_forecast?",
        ),
        (
            "expected_calls[0].arguments.days",
            "suite: case 'w-003': expected_calls[0].arguments.days: "
            "get_forecast's schema rejects it: field 'days': expected integer, "
            "got string '3'",
        ),
        (
            "mocks.get_forecast.respones",
            "suite: case 'w-003': mocks.get_forecast.respones: did you mean "
            "responses? As written, the whole mapping is the tool's fixed response",
        ),
    ]
    assert client.get("/api/runs").json()["count"] == 0
    lenient = client.post("/api/runs", json={"name": "r1", "suite": inline(MISTAKES), "lenient": True})
    assert lenient.status_code == 201, lenient.text


# -- imported suites ------------------------------------------------------------------------------

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
BFCL_PM = DATA / "bfcl" / "BFCL_v4_parallel_multiple.json"
TOOLBENCH = DATA / "toolbench" / "G1_answer_10_ChatGPT_DFS_woFilter_w2.json"
TAU2 = DATA / "tau2" / "gpt-4o_telecom_pr17.json"
INSPECT = DATA / "inspect" / "inspect-action_oxdna_claude-opus-4-1.eval"


@shared_data(TAU, SCHEMAS, TOOLBENCH, TAU2, INSPECT)
def test_tau_bench_toolbench_tau2_and_inspect_conversions_have_no_mistake(tmp_path: Path) -> None:
    for source, options in (
        (TAU, ["--from", "tau-bench", "--tools", str(SCHEMAS)]),
        (TOOLBENCH, ["--from", "toolbench"]),
        (TAU2, ["--from", "tau2"]),
        (INSPECT, ["--from", "inspect"]),
    ):
        out = tmp_path / source.stem
        assert console(["convert", str(source), *options, "--out", str(out)], tmp_path).returncode == 0
        done = console(["score", str(out / "suite.yaml"), str(out / "trajectories.jsonl"), "--json"], tmp_path)
        assert done.returncode == 0 and done.stderr == "", done.stderr


@shared_data(BFCL_PM, BFCL_PM.with_suffix(".possible_answer.json"))
def test_bfcls_ground_truth_that_breaks_its_schema_is_a_marked_exception(tmp_path: Path) -> None:
    assert console(["convert", str(BFCL_PM), "--from", "bfcl", "--out", "pm"], tmp_path).returncode == 0
    for suite in ("pm/suite.yaml", "pm/suite-2.yaml", "pm/suite-3.yaml"):
        done = console(["lint", suite], tmp_path)
        assert done.returncode in (0, 1) and "error: " not in done.stderr and "warning: " not in done.stderr
    # BFCL's ground truth passes a Python expression where the schema wants an array: marked, with the reason
    doc = yaml.safe_load((tmp_path / "pm" / "suite.yaml").read_text())
    case = next(c for c in doc["cases"] if c["id"] == "parallel_multiple_21")
    marked = case["expected_calls"][1]["schema_exceptions"]
    assert sorted(marked) == ["x", "y"]
    assert marked["x"].startswith(
        "field 'x': expected array, got string \"data['sales']\"; BFCL's checker takes a "
        "possible answer of another type than the schema's as written"
    )
    # without the mark, the same value is a mistake in the suite again
    del case["expected_calls"][1]["schema_exceptions"]
    (tmp_path / "unmarked.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    strict = console(["lint", "unmarked.yaml"], tmp_path)
    assert [e.split(": ", 1)[1] for e in errors(strict.stderr)[:2]] == [
        "case 'parallel_multiple_21': expected_calls[1].arguments.x: linear_regression_fit's schema rejects it: "
        "field 'x': expected array, got string \"data['sales']\"",
        "case 'parallel_multiple_21': expected_calls[1].arguments.y: linear_regression_fit's schema rejects it: "
        "field 'y': expected array, got string \"data['future_sales']\"",
    ]
    assert strict.returncode == 2
