"""BFCL's multi-turn category as conversations: one case per question, one
turn per user turn, the ground-truth call strings parsed (never run) into each
turn's expected calls; the ground truth, played back as the agent, scores 1 on
every family and every turn, apart from the one answer that breaks its
tool's own schema (read by hand in the file: ``close_ticket(ticket_id='ticket_001')``
for an integer ``ticket_id``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import SuiteError
from app.core.records import Trajectory, parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import Case, Suite, parse_suite
from app.importers import Conversion, convert
from app.importers.bfcl_multi_turn import parse_call
from tests.resources import DATA, shared_data

BFCL = DATA / "bfcl"
SOURCE = BFCL / "BFCL_v4_multi_turn_base.json"
FAMILIES = (
    "selection_precision",
    "selection_recall",
    "schema_validity",
    "argument_accuracy",
    "hallucinated_tools",
    "recovery",
    "hallucination_after_error",
)


@functools.cache
def converted() -> tuple[Conversion, list[Suite]]:
    conversion = convert("bfcl", SOURCE)
    return conversion, [parse_suite(doc) for doc in [conversion.suite, *conversion.extra_suites]]


def played_back(case: Case) -> Trajectory:
    """The ground truth as the agent's conversation: each turn's expected calls after its user message."""
    calls: list[dict[str, Any]] = []
    messages = []
    for turn in case.turns or []:
        messages.append({"role": "user", "content": turn.user, "calls_before": len(calls)})
        calls += [{"name": e.name, "arguments": e.arguments, "observation": "{}"} for e in turn.expected_calls or []]
    return parse_record(
        {"case_id": case.id, "question": case.question, "calls": calls, "messages": messages, "answer": "done"}
    )


@shared_data(SOURCE)
def test_one_case_per_question_one_turn_per_user_turn() -> None:
    conversion, suites = converted()
    cases = [c for s in suites for c in s.cases]
    assert len(cases) == 200 and all(c.turns for c in cases)
    # counted in the files: 734 user turns, 1142 ground-truth calls, 3 turns with none
    assert sum(len(c.turns or []) for c in cases) == 734
    assert sum(len(c.expected_calls or []) for c in cases) == 1142
    assert sum(1 for c in cases for t in c.turns or [] if t.expected_calls == []) == 3
    # one suite per set of involved classes (and excluded functions): 32 in this file
    assert len(suites) == 32
    first = next(c for c in cases if c.id == "multi_turn_base_0")
    assert (first.turns or [])[0].user.startswith("Move 'final_report.pdf' within document directory")
    # "sort('final_report.pdf')": the positional argument takes the schema's first property
    assert [(e.name, e.arguments) for e in (first.turns or [])[2].expected_calls or []] == [
        ("sort", {"file_name": "final_report.pdf"})
    ]
    suite0 = suites[0]
    assert suite0.toolset.label == "GorillaFileSystem+TwitterAPI without cp"
    assert "cp" not in suite0.toolset and "post_tweet" in suite0.toolset and "mv" in suite0.toolset
    assert any("calls are compared, not state" in n for n in conversion.notes)


@shared_data(SOURCE)
def test_ground_truth_scores_one_on_every_family_and_turn() -> None:
    conversion, suites = converted()
    broken = {n.split(":", 1)[0] for n in conversion.notes if "breaks its tool's own schema" in n}
    assert broken == {"multi_turn_base_173"}
    failing: dict[str, Any] = {}
    for suite in suites:
        report = score_trajectories(suite, [played_back(c) for c in suite.cases]).to_json()
        failing.update({c["case_id"]: c["failures_by_turn"] for c in report["cases"] if not c["passed"]})
        scopes = [report, *report["turns"].values()]
        if not any(c["case_id"] in broken for c in report["cases"]):
            for scope in scopes:
                for family in FAMILIES[:4]:
                    assert scope[family]["num"] == scope[family]["den"], (suite.name, family)
        for scope in scopes:
            assert (
                scope["hallucinated_tools"]["num"] == 0
                and scope["argument_accuracy"]["num"] == scope["argument_accuracy"]["den"]
            )
    assert failing == {"multi_turn_base_173": {"4": ["schema"]}}
    # the break is written into the suite as a marked exception, with the reason BFCL accepts it
    doc = next(
        d
        for d in [conversion.suite, *conversion.extra_suites]
        if any(c["id"] == "multi_turn_base_173" for c in d["cases"])
    )
    turn = next(c for c in doc["cases"] if c["id"] == "multi_turn_base_173")["turns"][3]
    assert turn["expected_calls"][0]["schema_exceptions"] == {
        "ticket_id": (
            "field 'ticket_id': expected integer, got string 'ticket_001'; "
            "BFCL runs multi-turn calls on its own Python "
            "classes and compares state and results: the schema's types are not checked"
        )
    }
    marked = [n for n in conversion.notes if "written as a marked exception" in n]
    assert marked == [
        "multi_turn_base_173: turn 4: the ground truth breaks its tool's own schema (written as a "
        "marked exception): close_ticket: field 'ticket_id': expected integer, got string 'ticket_001'"
    ]


@shared_data(SOURCE)
def test_a_call_in_a_turn_that_expects_none_is_a_selection_failure() -> None:
    _, suites = converted()
    suite = next(s for s in suites if "multi_turn_base_180" in s.by_id)
    case = suite.by_id["multi_turn_base_180"]
    assert [t.expected_calls == [] for t in case.turns or []] == [False, False, False, True, True, False]
    traj = played_back(case).to_dict()
    extra = next(e for t in case.turns or [] for e in t.expected_calls or [])  # a real tool, called in turn 4
    at = traj["messages"][3]["calls_before"]
    traj["calls"].insert(at, {"name": extra.name, "arguments": extra.arguments, "observation": "{}"})
    for m in traj["messages"][4:]:
        m["calls_before"] += 1
    out = score_trajectories(suite, [parse_record(traj)]).to_json()
    assert out["cases"][0]["failures_by_turn"] == {"4": ["selection"]}
    assert out["turns"]["4"]["selection_precision"] == {"num": 0, "den": 1}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tiny(tmp_path: Path, truth: list[list[str]], **question: Any) -> Path:
    docs = tmp_path / "multi_turn_func_doc"
    docs.mkdir(exist_ok=True)
    write_jsonl(
        docs / "math_api.json",
        [
            {
                "name": "add",
                "description": "a + b",
                "parameters": {
                    "type": "dict",
                    "properties": {"a": {"type": "float"}, "b": {"type": "float"}},
                    "required": ["a", "b"],
                },
            },
            {
                "name": "sqrt",
                "description": "square root",
                "parameters": {"type": "dict", "properties": {"number": {"type": "float"}}, "required": ["number"]},
            },
        ],
    )
    src = write_jsonl(
        tmp_path / "BFCL_v4_multi_turn_tiny.json",
        [
            {
                "id": "multi_turn_tiny_0",
                "question": [[{"role": "user", "content": f"turn {i}"}] for i in range(len(truth))],
                "involved_classes": ["MathAPI"],
                "initial_config": {},
                **question,
            }
        ],
    )
    write_jsonl(
        tmp_path / "BFCL_v4_multi_turn_tiny.possible_answer.json", [{"id": "multi_turn_tiny_0", "ground_truth": truth}]
    )
    return src


def test_calls_are_parsed_never_run(tmp_path: Path) -> None:
    src = _tiny(tmp_path, [["add(1, b=2.5)"], ["__import__('os').system('touch pwned')"]])
    with pytest.raises(SuiteError, match="not a call of a function by name"):
        convert("bfcl", src)
    src = _tiny(tmp_path, [["add(a=open('x').read(), b=1)"]])
    with pytest.raises(SuiteError, match="not a literal value"):
        convert("bfcl", src)
    assert not (tmp_path / "pwned").exists()
    props = {"add": ["a", "b"]}
    assert parse_call("add(-1, b=[1, {'k': (2,)}])", props, "") == {
        "name": "add",
        "arguments": {"a": -1, "b": [1, {"k": (2,)}]},
    }
    with pytest.raises(SuiteError, match="takes 2 arguments by position"):
        parse_call("add(1, 2, 3)", props, "")


def test_excluded_functions_leave_the_toolset_and_a_missed_one_is_noted(tmp_path: Path) -> None:
    src = _tiny(tmp_path, [["add(a=1.0, b=2.0)"], []], excluded_function=["sqrt"], missed_function={"1": ["add"]})
    conversion = convert("bfcl", src)
    suite = parse_suite(conversion.suite)
    assert [t.name for t in suite.toolset] == ["add"]
    assert any("missed_function" in n for n in conversion.notes)
    case = suite.cases[0]
    assert [t.expected_calls for t in case.turns or []][1] == []
