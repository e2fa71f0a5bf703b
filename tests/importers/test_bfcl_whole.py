"""BFCL, whole: each question's own ground truth, scored as the agent's
answer, passes every family, nested possible answers included; the ground
truths that break BFCL's own schema are named in the converter's notes (and
here, read by hand from the files). Multi-turn: tests/importers/test_bfcl_multi_turn.py."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.errors import SuiteError
from app.core.records import parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import Suite, parse_suite
from app.core.suites.tolerance import Mismatch, compare_arguments, compile_comparison, parse_rule
from app.importers import Conversion, convert
from tests.resources import DATA, require_data

BFCL = DATA / "bfcl"

GOLD = yaml.safe_load((Path(__file__).parents[1] / "gold" / "bfcl.yaml").read_text())["schema_breaks"]
# Ground truths that break their question's own schema, labelled by hand in
# tests/gold/bfcl.yaml, and which picked answers break it.
SCHEMA_BREAKS = {
    name: {qid for qid in GOLD if qid.startswith(name)}
    for name in ("simple_python", "parallel_multiple", "irrelevance")
}
FAILING = {
    (name, pick): {qid for qid in SCHEMA_BREAKS[name] if pick in GOLD[qid]["fails_when"]}
    for name in SCHEMA_BREAKS
    for pick in ("first", "last")
}


need = require_data  # the shared sample files (tests/resources.py says how to get them)


def _pick(values: list[Any], last: bool) -> Any:
    given = [v for v in values if v != ""]
    return _resolve(given[-1] if last else given[0], last)


def _keep(values: list[Any], last: bool) -> bool:
    """Which arguments the answer gives: all but the optional ones (first
    pick), or every one that has a value (last pick)."""
    return "" not in values or (last and any(v != "" for v in values))


def _resolve(value: Any, last: bool) -> Any:
    """A nested possible answer as a value: each field's picked value."""
    if isinstance(value, dict):
        return {k: _pick(v, last) for k, v in value.items() if _keep(v, last)}
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return [_resolve(v, last) for v in value]
    return value


def ground_truth_calls(entries: list[Any], last: bool) -> list[dict[str, Any]]:
    calls = []
    for entry in entries:
        ((name, params),) = entry.items()
        calls.append({"name": name, "arguments": {k: _pick(v, last) for k, v in params.items() if _keep(v, last)}})
    return calls


@functools.cache
def converted(name: str) -> tuple[Conversion, list[Suite]]:
    """A category converted and its suites loaded, once per test session."""
    conversion = convert("bfcl", BFCL / f"BFCL_v4_{name}.json")
    return conversion, [parse_suite(doc) for doc in [conversion.suite, *conversion.extra_suites]]


@pytest.mark.parametrize("name", ["simple_python", "parallel_multiple", "irrelevance"])
def test_ground_truth_scores_one_on_every_family(name: str) -> None:
    source = BFCL / f"BFCL_v4_{name}.json"
    need(source)
    conversion, suites = converted(name)
    noted = {n.split(":", 1)[0] for n in conversion.notes if "breaks the question's own schema" in n}
    assert noted == SCHEMA_BREAKS[name]
    answers_file = BFCL / f"BFCL_v4_{name}.possible_answer.json"
    answers = {}
    if answers_file.exists():
        answers = {(a := json.loads(line))["id"]: a["ground_truth"] for line in answers_file.open()}
    for pick in ("first", "last"):
        _check_pick(name, pick, suites, answers)


def _check_pick(name: str, pick: str, suites: list[Suite], answers: dict[str, Any]) -> None:
    failing: dict[str, list[str]] = {}
    cases = 0
    for suite in suites:
        trajs = [
            parse_record(
                {"case_id": c.id, "calls": ground_truth_calls(answers.get(c.id, []), pick == "last"), "answer": "done"}
            )
            for c in suite.cases
        ]
        report = score_trajectories(suite, trajs).to_json()
        cases += len(report["cases"])
        failing.update({c["case_id"]: c["failures"] for c in report["cases"] if not c["passed"]})
        assert report["argument_accuracy"]["num"] == report["argument_accuracy"]["den"]
        assert report["hallucinated_tools"]["num"] == 0
        if not any(c["case_id"] in FAILING[name, pick] for c in report["cases"]):
            for family in ("selection_precision", "selection_recall", "schema_validity"):
                assert report[family]["num"] == report[family]["den"], (suite.name, family)
    assert cases == {"simple_python": 400, "parallel_multiple": 200, "irrelevance": 240}[name]
    assert set(failing) == FAILING[name, pick]
    assert all("schema" in f for f in failing.values())


def test_nested_possible_answers_become_nested_one_of() -> None:
    need(BFCL / "BFCL_v4_simple_python.json")
    conversion, suites = converted("simple_python")
    case = next(c for c in conversion.suite["cases"] if c["id"] == "simple_python_96")
    (call,) = case["expected_calls"]
    # conditions: [[{"field": ["age"], "operation": [">"], "value": ["25"]}, {"field": ["job"], ...}]]
    assert call["arguments"]["conditions"] == [
        {"field": "age", "operation": ">", "value": "25"},
        {"field": "job", "operation": "=", "value": "engineer"},
    ]
    assert call["tolerance"]["conditions"]["items"][0] == {
        "fields": {
            "field": {"rule": "one_of", "values": ["age"]},
            "operation": {"rule": "one_of", "values": [">"]},
            "value": {"rule": "one_of", "values": ["25"]},
        }
    }
    suite = next(s for s in suites if "simple_python_89" in s.by_id)
    # conditions: [{"department": ["Science"], "school": ["Bluebird High School", "Bluebird HS"]}]
    exp = suite.by_id["simple_python_89"].expected_calls[0]  # type: ignore[index]
    compare = compile_comparison(exp.arguments, exp.tolerance)
    base = dict(exp.arguments)
    assert compare({**base, "conditions": {"department": "science", "school": "Bluebird HS"}}) == []
    assert compare({**base, "conditions": {"department": "Science", "school": "Bluebird Elementary"}}) == [
        Mismatch("conditions.school", "one_of", ["Bluebird High School", "Bluebird HS"], "Bluebird Elementary")
    ]


def test_nested_rules_by_hand() -> None:
    rule = parse_rule(
        {
            "items": [
                {"fields": {"a": {"one_of": [1, 2]}, "b": {"one_of": ["x", ""]}}},
                {"fields": {"a": {"one_of": [3]}}},
            ],
            "optional": True,
        }
    )
    rules = {"p": rule}
    expected = {"p": [{"a": 1, "b": "x"}, {"a": 3}]}
    assert compare_arguments({"p": [{"a": 2}, {"a": 3}]}, expected, rules) == []  # b may be left out
    assert compare_arguments({}, expected, rules) == []  # optional: the whole list may be left out
    assert compare_arguments({"p": [{"a": 1, "b": "y"}, {"a": 3}]}, expected, rules) == [
        Mismatch("p[0].b", "one_of", ["x", ""], "y")
    ]
    assert compare_arguments({"p": [{"a": 1}, {"a": 3, "c": 0}]}, expected, rules) == [
        Mismatch("p[1].c", "fields", None, 0)
    ]  # a key the answer does not name
    assert compare_arguments({"p": [{"a": 1}]}, expected, rules) == [
        Mismatch("p", "items", expected["p"], [{"a": 1}])
    ]  # one element short
    assert (
        compare_arguments({"p": [{"a": 1}, {"a": 4}]}, expected, rules)
        == (compile_comparison(expected, rules)({"p": [{"a": 1}, {"a": 4}]}))
        == [Mismatch("p[1].a", "one_of", [3], 4)]
    )
    assert not parse_rule({"fields": {"a": "exact"}}).check(None, {"a": 1})
    for bad in (
        {"fields": [1]},
        {"items": {}},
        {"fields": {}, "optional": "yes"},
        {"fields": {"a": "fuzzy"}},
        {"fields": {}, "extra": 1},
    ):
        with pytest.raises(ValueError):
            parse_rule(bad)
    deep: Any = "exact"
    for _ in range(40):
        deep = {"fields": {"a": deep}}
    with pytest.raises(ValueError, match="nested deeper"):
        parse_rule(deep)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


TOOL = {
    "name": "f",
    "description": "d",
    "parameters": {
        "type": "dict",
        "properties": {"x": {"type": "integer"}, "y": {"type": "dict", "properties": {"z": {"type": "string"}}}},
        "required": ["x"],
    },
}


def test_empty_possible_answers_and_several_objects_are_warnings(tmp_path: Path) -> None:
    src = write_jsonl(
        tmp_path / "BFCL_v4_simple.json",
        [
            {"id": "simple_0", "question": [[{"role": "user", "content": "q"}]], "function": [TOOL]},
            {"id": "simple_1", "question": [[{"role": "user", "content": "q"}]], "function": [TOOL]},
        ],
    )
    write_jsonl(
        tmp_path / "BFCL_v4_simple.possible_answer.json",
        [
            {"id": "simple_0", "ground_truth": [{"f": {"x": []}}]},
            {"id": "simple_1", "ground_truth": [{"f": {"x": [1], "y": [{"z": ["a"]}, {"z": ["b"]}]}}]},
        ],
    )
    conversion = convert("bfcl", src)
    assert conversion.notes == [
        "simple_0: f.x: the possible answers are an empty list: no value is acceptable, the argument is not checked",
        "simple_1: f.y: 2 acceptable nested values: only the first is accepted",
    ]
    first = conversion.suite["cases"][0]["expected_calls"][0]
    assert first == {"name": "f", "arguments": {}}  # not a silent one_of: []
    second = conversion.suite["cases"][1]["expected_calls"][0]
    assert second["tolerance"] == {"y": {"fields": {"z": {"rule": "one_of", "values": ["a"]}}}}


def test_the_issue_example_optional_nested_field(tmp_path: Path) -> None:
    """{"params": [{"fabric": ["network222"], "insightsGroup": ["", "default"]}]}: insightsGroup may be
    left out or be "default"; fabric must be network222."""
    tool = {
        "name": "get_nodes",
        "description": "d",
        "parameters": {
            "type": "dict",
            "properties": {
                "params": {
                    "type": "dict",
                    "properties": {"fabric": {"type": "string"}, "insightsGroup": {"type": "string"}},
                }
            },
            "required": ["params"],
        },
    }
    src = write_jsonl(
        tmp_path / "BFCL_v4_live_simple.json",
        [{"id": "live_simple_0", "question": [[{"role": "user", "content": "q"}]], "function": [tool]}],
    )
    write_jsonl(
        tmp_path / "BFCL_v4_live_simple.possible_answer.json",
        [
            {
                "id": "live_simple_0",
                "ground_truth": [
                    {"get_nodes": {"params": [{"fabric": ["network222"], "insightsGroup": ["", "default"]}]}}
                ],
            }
        ],
    )
    conversion = convert("bfcl", src)
    assert conversion.notes == []
    suite = parse_suite(conversion.suite)

    def passed(params: dict[str, Any]) -> bool:
        traj = parse_record(
            {
                "case_id": "live_simple_0",
                "calls": [{"name": "get_nodes", "arguments": {"params": params}}],
                "answer": "ok",
            }
        )
        return bool(score_trajectories(suite, [traj]).to_json()["cases"][0]["passed"])

    assert passed({"fabric": "network222"}) and passed({"fabric": "network222", "insightsGroup": "default"})
    assert not passed({"fabric": "network222", "insightsGroup": "other"})
    assert not passed({"fabric": "network333"}) and not passed({"insightsGroup": "default"})


def test_a_possible_answer_nested_too_deep_is_refused(tmp_path: Path) -> None:
    deep: Any = "x"
    for _ in range(40):
        deep = [{"y": [deep]}]
    src = write_jsonl(
        tmp_path / "BFCL_v4_simple.json",
        [{"id": "simple_0", "question": [[{"role": "user", "content": "q"}]], "function": [TOOL]}],
    )
    write_jsonl(
        tmp_path / "BFCL_v4_simple.possible_answer.json",
        [{"id": "simple_0", "ground_truth": [{"f": {"x": [1], "y": deep}}]}],
    )
    with pytest.raises(SuiteError, match=r"simple_0: f\.y(\.y\[0\])+: a possible answer nested deeper than 16"):
        convert("bfcl", src)
