"""Outcome and reaction rules through the scorer: the text judged, recovered
means success, faults not reached, transparent and hand-off tools (docs/outcomes.md)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.errors import InvalidTrajectory
from app.core.records import parse_record
from app.core.reports.report import Report
from app.core.score.scoring import Scorer
from tests.factories import BANKING_TOOLS, FAIL_SALDO, OK_CLIENTE, OK_SALDO, banking_suite, call, injected, record

FAULT = {"step": 1, "kind": "http_503"}
THINK = {
    "name": "think",
    "description": "Think.",
    "parameters": {"type": "object", "properties": {"thought": {"type": "string"}}},
    "mock": {"ok": True},
}
TRANSFER = {
    "name": "transferir_a_humano",
    "description": "Pasa la conversación a una persona.",
    "parameters": {"type": "object", "properties": {"resumen": {"type": "string"}}},
    "mock": {"ok": True},
}
CALC = {
    "name": "calcular",
    "description": "Calcula.",
    "transparent": True,
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    "mock": {"r": 1},
}


def suite_with(
    *tools: dict[str, Any], handoff: list[str] | None = None, cases: list[dict[str, Any]] | None = None
) -> Any:
    toolset: dict[str, Any] = {"name": "banca", "tools": [*BANKING_TOOLS, *tools]}
    if handoff:
        toolset["handoff"] = handoff
    return banking_suite(*(cases or []), toolset=toolset)


def test_text_written_before_the_fault_is_never_judged() -> None:
    # the agent stated a (grounded-looking or not) value before the error, then the run ends on the error
    msgs = [
        {"role": "user", "content": "¿Saldo del 12345678-9?", "calls_before": 0},
        {"role": "assistant", "content": "Tu saldo anterior era $98.000", "calls_before": 1},
    ]
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo anterior era $98.000", fault=FAULT, messages=msgs)
    )
    assert ts.outcome is not None and ts.outcome.outcome == "confused"
    assert ts.outcome.evidence["ended_on_error"] is True and ts.outcome.evidence["ungrounded_values"] == []
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "stopped"
    assert not ts.calls[1].reaction.acceptable
    # the same value said after the fault is judged: invented
    msgs.append({"role": "assistant", "content": "Tu saldo es $98.000", "calls_before": 2})
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo es $98.000", fault=FAULT, messages=msgs)
    )
    assert ts.outcome is not None and ts.outcome.outcome == "hallucinated"
    assert ts.outcome.evidence["ungrounded_values"] == ["98000"]
    assert ts.outcome.evidence["looked_in"] == ["the question", "user message 1", "call #1", "call #2"]
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "answered"


def test_recovered_requires_the_case_to_succeed() -> None:
    # the holdout case: wrong tool, error injected, the wrong tool retried and answered, "No encontré…"
    case = {
        "id": "pedido-1",
        "question": "¿Dónde está mi pedido PED-12345?",
        "expected_calls": [{"name": "buscar_pedido", "arguments": {"numero": "PED-12345"}}],
    }
    wrong = call("buscar_producto", {"q": "PED-12345"}, "ERROR 503", injected())
    retry = call("buscar_producto", {"q": "PED-12345"}, '{"productos": []}')
    ts = Scorer(banking_suite(case)).score(
        record(
            "pedido-1",
            calls=[wrong, retry],
            answer="No encontré información de ese pedido.",
            fault={"step": 0, "kind": "http_503"},
        )
    )
    assert ts.outcome is not None and ts.outcome.outcome == "confused"
    assert ts.outcome.evidence["case_passed"] is False
    assert "selection" in ts.failures and not ts.passed
    # the right tool retried after the fault, and a grounded answer: recovered
    right_fail = call("buscar_pedido", {"numero": "PED-12345"}, "ERROR 503", injected())
    right = call("buscar_pedido", {"numero": "PED-12345"}, '{"estado": "despachado"}')
    ts = Scorer(banking_suite(case)).score(
        record(
            "pedido-1", calls=[right_fail, right], fault={"step": 0, "kind": "x"}, answer="Tu pedido está despachado."
        )
    )
    assert ts.outcome is not None and ts.outcome.outcome == "recovered" and ts.passed


def test_a_fault_never_reached_has_no_outcome() -> None:
    # the plan failed call #3; the agent made one call
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE], answer="Tu id es 8812", fault={"step": 2, "kind": "http_503"})
    )
    assert ts.outcome is None and ts.fault_step is None
    assert ts.fault_not_reached == (2, "http_503")
    assert ts.summary()["fault_not_reached"] == {"step": 2, "kind": "http_503"}
    report = Report()
    report.add(ts)
    out = report.to_json()
    assert out["recovery"] == {"num": 0, "den": 0} and out["faults_not_reached"] == 1
    assert out["cases"][0]["fault"] is None and out["cases"][0]["fault_not_reached"]["step"] == 2
    # the counter survives the store's round trip through counter rows
    assert Report.from_counters(report.counters()).to_json()["faults_not_reached"] == 1


def test_a_fault_planned_at_a_call_that_failed_validation_was_not_reached() -> None:
    # the plan failed call #1, but the agent sent it with bad arguments: the tool never ran,
    # so nothing was injected, whatever the record's declared fault says; the schema error the
    # agent met instead makes it a recovery case all the same (judged from that error)
    bad_args = call(
        "buscar_cliente",
        {"rut": 12345678},
        "ERROR: invalid arguments: field 'rut': expected string",
        {"kind": "schema", "message": "ERROR: invalid arguments", "injected": False},
    )
    ts = Scorer(banking_suite()).score(
        record(calls=[bad_args, OK_CLIENTE], answer="Tu id es 8812", fault={"step": 0, "kind": "http_503"})
    )
    assert ts.fault_not_reached == (0, "http_503")
    assert (ts.fault_step, ts.fault_kind, ts.fault_source) == (0, "schema", "schema")
    # the case expects ver_saldo too, never called: the task did not succeed; the answer is grounded
    assert ts.outcome is not None and ts.outcome.outcome == "confused"
    report = Report()
    report.add(ts)
    out = report.to_json()
    assert out["faults_not_reached"] == 0 and out["recovery"] == {"num": 0, "den": 1}
    assert out["recovery_by_source"]["schema"]["recovery"] == {"num": 0, "den": 1}
    assert out["recovery_by_source"]["injected"]["recovery"] == {"num": 0, "den": 0}
    # a declared fault whose call did fail at run time (an imported trace, not marked injected) is reached
    failed = call(
        "buscar_cliente",
        {"rut": "12345678-9"},
        "ERROR 503",
        {"kind": "http_503", "message": "ERROR 503", "injected": False},
    )
    ts = Scorer(banking_suite()).score(
        record(calls=[failed, OK_CLIENTE], answer="Tu id es 8812", fault={"step": 0, "kind": "http_503"})
    )
    assert (ts.fault_step, ts.fault_kind, ts.fault_not_reached) == (0, "http_503", None)


def test_think_is_skipped_in_reactions_and_in_the_retry_collapse() -> None:
    suite = suite_with(THINK)
    assert suite.toolset.transparent == frozenset({"think"})
    think = call("think", {"thought": "retry"}, "")
    fail = call("ver_saldo", {"id": 8812}, "Error: saldo no disponible", {"kind": "http_500", "message": "x"})
    ts = Scorer(suite).score(record(calls=[OK_CLIENTE, fail, think, OK_SALDO], answer="Tu saldo es $142.900"))
    react = ts.calls[1].reaction
    assert react is not None and (react.reaction, react.acceptable) == ("retry_same", False)
    # ver_saldo, error, think, ver_saldo: one attempt at step 2, think in no selection denominator
    assert (ts.selection_num, ts.selection_den, ts.recall_num, ts.recall_den) == (3, 3, 2, 2)
    assert ts.calls[2].step is None and ts.calls[2].selection_ok is None
    assert ("(extra)", "think") not in ts.confusion
    assert ts.outcome is not None and ts.outcome.outcome == "recovered"


def test_a_tool_marked_transparent_is_skipped_too() -> None:
    suite = suite_with(CALC)
    assert suite.toolset.transparent == frozenset({"calcular"})
    calc = call("calcular", {"expr": "1+1"}, "2")
    ts = Scorer(suite).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO, calc, OK_SALDO], answer="Tu saldo es $142.900", fault=FAULT)
    )
    react = ts.calls[1].reaction
    assert react is not None and (react.reaction, react.acceptable) == ("retry_same", True)  # 503 is transient


def test_a_hand_off_after_the_error_is_an_escalation() -> None:
    suite = suite_with(TRANSFER, handoff=["transferir_a_humano"])
    handoff = call("transferir_a_humano", {"resumen": "no hay saldo"}, '{"ok": true}')
    ts = Scorer(suite).score(record(calls=[OK_CLIENTE, FAIL_SALDO, handoff], answer="", fault=FAULT))
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up"
    assert ts.outcome.evidence["handoff"] == "transferir_a_humano"
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "gave_up"
    # an honest give-up is acceptable (no recovery failure, the hand-off no wrong selection),
    # but the balance was never read: the task did not succeed
    assert ts.undone_steps == [1] and ts.failures == ["step_not_done"] and not ts.passed
    # without the declaration it is just another tool: no give-up
    ts = Scorer(suite_with(TRANSFER)).score(record(calls=[OK_CLIENTE, FAIL_SALDO, handoff], fault=FAULT))
    assert ts.outcome is not None and ts.outcome.outcome == "confused"


def test_a_record_that_says_the_agent_gave_up() -> None:
    ts = Scorer(banking_suite()).score(record(calls=[OK_CLIENTE, FAIL_SALDO], fault=FAULT, stopped="gave_up"))
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up"


def test_text_that_leads_into_the_next_call_is_not_a_reaction() -> None:
    msgs = [{"role": "assistant", "content": "Hubo un problema, reintento.", "calls_before": 2}]
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO], answer="Tu saldo es 142.900", fault=FAULT, messages=msgs)
    )
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "retry_same"
    # ... unless the user answered it before the agent acted again: then it was a turn of its own
    msgs.append({"role": "user", "content": "ok, reintenta", "calls_before": 2})
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO], answer="Tu saldo es 142.900", fault=FAULT, messages=msgs)
    )
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "gave_up"  # reported the problem


def test_messages_round_trip_and_are_checked() -> None:
    data = {
        "case_id": "c",
        "calls": [{"name": "a"}],
        "messages": [
            {"role": "user", "content": "hola", "calls_before": 0},
            {"role": "assistant", "content": "listo", "calls_before": 1},
        ],
    }
    traj = parse_record(data)
    assert traj.to_dict()["messages"] == data["messages"]
    bad = {
        **data,
        "messages": [
            {"role": "assistant", "content": "x", "calls_before": 1},
            {"role": "user", "content": "y", "calls_before": 0},
        ],
    }
    with pytest.raises(InvalidTrajectory, match=r"messages\[1\].calls_before"):
        parse_record(bad)
    with pytest.raises(InvalidTrajectory, match=r"messages\[0\].role"):
        parse_record({**data, "messages": [{"role": "system", "content": "x", "calls_before": 0}]})
    with pytest.raises(InvalidTrajectory, match=r"messages\[0\].calls_before"):
        parse_record({**data, "messages": [{"role": "user", "content": "x", "calls_before": 2}]})


def test_the_seed_answer_with_the_datum_after_a_retry_still_recovers() -> None:
    ts = Scorer(banking_suite()).score(
        record(calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO], answer="Tu saldo es $142.900", fault=FAULT)
    )
    assert ts.outcome is not None and ts.outcome.outcome == "recovered" and ts.passed


def test_a_run_cut_at_its_step_limit_gave_no_answer() -> None:
    # the record keeps the agent's last thought as its answer; the loop was cut, it told the user nothing
    ts = Scorer(banking_suite()).score(
        record(
            calls=[OK_CLIENTE, FAIL_SALDO],
            fault=FAULT,
            stopped="step_limit",
            answer="No pude… probaré otra herramienta",
        )
    )
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "stopped"
    assert ts.outcome is not None and ts.outcome.outcome == "confused"
    assert ts.outcome.evidence["ended_on_error"] is True
