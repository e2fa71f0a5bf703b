"""Suites load from YAML or JSON; a bad one names file, case and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.errors import SuiteError
from app.core.suites.suite import load_suite
from tests.factories import BANKING_TOOLS, SALDO_CASE


def write(tmp_path: Path, doc: Any, name: str = "suite.yaml") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc, allow_unicode=True))
    return p


def test_yaml_and_json_with_a_toolset_path(tmp_path: Path) -> None:
    (tmp_path / "tools.yaml").write_text(
        yaml.safe_dump({"label": "v1", "tools": BANKING_TOOLS, "dependencies": [["buscar_cliente", "ver_saldo"]]})
    )
    doc = {"name": "banca", "toolset": "tools.yaml", "cases": [SALDO_CASE], "give_up_phrases": ["sin sistema"]}
    for name in ("suite.yaml", "suite.json"):
        suite = load_suite(write(tmp_path, doc, name))
        assert suite.name == "banca"
        assert suite.toolset.label == "v1"
        assert suite.pairs_for(suite.cases[0]) == [("buscar_cliente", "ver_saldo")]
        assert suite.cases[0].expected_datum == ["142900"]
        assert suite.give_up_phrases == ["sin sistema"]


def case_with(**fields: Any) -> dict[str, Any]:
    return {"name": "s", "toolset": BANKING_TOOLS, "cases": [dict(SALDO_CASE, **fields)]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (case_with(match="fuzzy"), "case 'saldo-001': match: must be one of strict, unordered, subset, superset"),
        (case_with(question=""), "case 'saldo-001': question: required, a non-empty string"),
        (
            case_with(expected_calls=[{"name": "ver_saldo", "tolerance": {"id": "approx"}}]),
            "case 'saldo-001': expected_calls[0].tolerance.id: unknown tolerance rule 'approx'",
        ),
        (case_with(expected_calls=[{"arguments": {}}]), "case 'saldo-001': expected_calls[0]: each expected call"),
        (case_with(dependencies=[["a"]]), "case 'saldo-001': dependencies[0]: each pair is [before, after]"),
        (case_with(mocks={"no_existe": {}}), "case 'saldo-001': mocks.no_existe: no tool 'no_existe'"),
        (case_with(expected_state=[1]), "case 'saldo-001': expected_state: must be a mapping"),
        (case_with(notes={"a": 1}), "case 'saldo-001': notes: must be a list of texts"),
        ({"name": "s", "toolset": BANKING_TOOLS, "cases": [SALDO_CASE, SALDO_CASE]}, "case 'saldo-001': id: duplicate"),
        ({"name": "s", "cases": []}, "toolset: required"),
        ({"name": "s", "toolset": [{"description": "x"}], "cases": []}, "toolset: a tool needs a 'name'"),
        ({"name": "s", "toolset": "missing.yaml", "cases": []}, "missing.yaml: file not found"),
        (
            {
                "name": "s",
                "toolset": [
                    {
                        "name": "t",
                        "description": "",
                        "parameters": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}},
                    }
                ],
                "cases": [],
            },
            "tool 't': $ref '#/nowhere' does not resolve",
        ),
    ],
)
def test_bad_suites_name_file_case_and_field(tmp_path: Path, doc: Any, message: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert str(path) in str(err.value)
    assert message in str(err.value)


def test_notes_are_texts_for_people_a_single_one_a_list_of_one(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, case_with(notes="the user must hear the balance")))
    assert suite.cases[0].notes == ["the user must hear the balance"]
    assert load_suite(write(tmp_path, case_with(notes=["a", 2]))).cases[0].notes == ["a", "2"]
    assert load_suite(write(tmp_path, case_with())).cases[0].notes == []


def test_unparseable_file(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("name: [unclosed")
    with pytest.raises(SuiteError, match="cannot parse"):
        load_suite(p)


# -- conversations (multi-turn cases) -------------------------------------------

_TOOLS = [
    {"name": "buscar", "description": "busca", "parameters": {"type": "object"}},
    {"name": "emitir", "description": "emite", "parameters": {"type": "object"}},
]


def _conversation(**case: object) -> dict[str, object]:
    return {"name": "s", "toolset": _TOOLS, "cases": [{"id": "c1", **case}]}


def test_scripted_turns_keep_their_own_calls_and_forbidden_calls() -> None:
    from app.core.suites.suite import parse_suite

    suite = parse_suite(
        _conversation(
            turns=[
                {"user": "Necesito una nota", "expected_calls": ["buscar"], "forbidden_calls": ["emitir"]},
                {
                    "user": "Sí, confirmo",
                    "expected_calls": [{"name": "emitir", "arguments": {"folio": "F-1"}}],
                    "match": "subset",
                },
            ]
        )
    )
    case = suite.cases[0]
    assert case.multi_turn and case.user is None
    assert case.question == "Necesito una nota"
    assert [t.user for t in case.turns or []] == ["Necesito una nota", "Sí, confirmo"]
    assert [c.name for c in case.expected_calls or []] == ["buscar", "emitir"]
    assert case.turns is not None and case.turns[1].match == "subset"
    assert [f.name for f in case.turns[0].forbidden_calls] == ["emitir"]
    assert case.forbidden_calls == []  # a turn's forbidden calls stay in that turn


def test_a_simulated_user_is_read_with_its_defaults() -> None:
    from app.core.suites.suite import parse_suite

    case = parse_suite(
        _conversation(
            question="Quiero mi saldo",
            expected_calls=["buscar"],
            user={"instruction": "Eres un cliente", "known": {"rut": "1-9"}},
        )
    ).cases[0]
    assert case.multi_turn and case.turns is None
    assert case.user is not None
    assert (case.user.known, case.user.patience, case.user.stop) == ({"rut": "1-9"}, 5, "###STOP###")


def test_a_single_question_case_is_not_a_conversation() -> None:
    from app.core.suites.suite import parse_suite

    case = parse_suite(_conversation(question="q", expected_calls=["buscar"])).cases[0]
    assert not case.multi_turn and case.turns is None and case.user is None


@pytest.mark.parametrize(
    ("case", "field", "message"),
    [
        ({"turns": []}, "turns", "non-empty list"),
        ({"turns": [{"expected_calls": ["buscar"]}]}, "turns[0].user", "required"),
        ({"turns": [{"user": "a", "match": "fuzzy"}]}, "turns[0].match", "must be one of"),
        ({"turns": [{"user": "a", "expected_calls": [{"arguments": {}}]}]}, "turns[0].expected_calls[0]", "name"),
        ({"turns": [{"user": "a", "forbidden_calls": [7]}]}, "turns[0].forbidden_calls[0]", "tool name"),
        ({"question": "q", "turns": [{"user": "a"}]}, "question", "in each turn"),
        ({"turns": [{"user": "a"}], "expected_calls": ["buscar"]}, "expected_calls", "in each turn"),
        ({"turns": [{"user": "a"}], "user": {"instruction": "x"}}, "user", "not both"),
        ({"question": "q", "user": {"known": {}}}, "user.instruction", "required"),
        ({"question": "q", "user": {"instruction": "x", "patience": 0}}, "user.patience", "from 1 to"),
        ({"question": "q", "user": {"instruction": "x", "known": ["rut"]}}, "user.known", "must map"),
    ],
)
def test_a_bad_conversation_names_the_field(case: dict[str, object], field: str, message: str) -> None:
    from app.core.errors import SuiteError
    from app.core.suites.suite import parse_suite

    with pytest.raises(SuiteError) as info:
        parse_suite(_conversation(**case))
    assert info.value.field == field and info.value.case_id == "c1"
    assert message in str(info.value)
