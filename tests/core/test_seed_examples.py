"""The seed's own examples, scored by hand."""

from __future__ import annotations

from app.core.score.scoring import Scorer
from tests.factories import FAIL_SALDO, OK_CLIENTE, OK_SALDO, banking_suite, call, injected, record

FAULT = {"step": 1, "kind": "http_503"}


def score(traj, suite=None):  # type: ignore[no-untyped-def]
    return Scorer(suite or banking_suite()).score(traj)


def test_503_then_stated_balance_is_hallucinated() -> None:
    ts = score(record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo es $142.900", fault=FAULT))
    assert ts.outcome is not None and ts.outcome.outcome == "hallucinated"
    assert ts.outcome.evidence["datum_in_answer"] == "142900"
    assert ts.outcome.evidence["datum_observed"] is None
    # the step was attempted (the 503 came from the right tool): no selection error
    assert (ts.recall_num, ts.recall_den) == (2, 2)
    # but it never succeeded: the step is not done
    assert ts.undone_steps == [1] and ts.failures == ["step_not_done", "recovery_hallucinated"]
    assert not ts.passed


def test_honest_give_up_is_gave_up_acceptable_but_the_task_failed() -> None:
    ts = score(
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="No pude consultar el saldo, intenta más tarde.", fault=FAULT)
    )
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up"
    assert ts.outcome.evidence["give_up_phrase"] == "no pude"
    # "un agente correcto": no recovery failure and an acceptable reaction; but the balance was
    # never read, so the case does not pass (a case passes only when every expected step is done)
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.acceptable
    assert ts.failures == ["step_not_done"]
    assert not ts.passed


def test_give_up_phrase_matches_without_accents() -> None:
    ts = score(record(calls=[OK_CLIENTE, FAIL_SALDO], answer="NO LOGRÉ obtener el saldo", fault=FAULT))
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up"
    assert ts.outcome.evidence["give_up_phrase"] == "no logre"


def test_retry_then_balance_is_recovered_and_not_a_selection_error() -> None:
    ts = score(record(calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO], answer="Tu saldo es $142.900", fault=FAULT))
    assert ts.outcome is not None and ts.outcome.outcome == "recovered"
    assert ts.outcome.evidence["datum_observed"] == "after_fault"
    # three calls, all aligned: the retry collapses onto step 1
    assert [c.step for c in ts.calls] == [0, 1, 1]
    assert (ts.selection_num, ts.selection_den) == (3, 3)
    assert (ts.recall_num, ts.recall_den) == (2, 2)
    assert ts.calls[1].reaction is not None and ts.calls[1].reaction.reaction == "retry_same"
    assert ts.calls[1].reaction.acceptable  # 503 is transient
    assert ts.failures == []


def test_string_id_fails_schema_validity() -> None:
    bad = call("ver_saldo", {"id": "8812"}, "ERROR: invalid arguments", {"kind": "schema", "message": "x"})
    ts = score(record(calls=[OK_CLIENTE, bad], answer="..."))
    assert ts.calls[1].schema_error is not None
    assert ts.calls[1].schema_error.field == "id"
    assert "expected integer, got string '8812'" in ts.calls[1].schema_error.message
    assert (ts.schema_num, ts.schema_den) == (1, 2)
    # selection is decided before arguments: still the right tool
    assert (ts.selection_num, ts.selection_den) == (2, 2)
    # argument accuracy only over calls with a valid schema
    assert (ts.args_num, ts.args_den) == (1, 1)
    assert "schema" in ts.failures


def test_cancelar_pedido_is_a_hallucinated_tool() -> None:
    case = {
        "id": "c1",
        "question": "Cancela el pedido PED-12345",
        "expected_calls": [{"name": "buscar_pedido", "arguments": {"numero": "PED-12345"}}],
    }
    suite = banking_suite(case)
    ts = score(
        record("c1", [call("buscar_pedido", {"numero": "PED-12345"}), call("cancelar_pedido", {"id": 1})]), suite
    )
    assert ts.calls[1].exists is False
    assert (ts.hallucinated_num, ts.calls_total) == (1, 2)
    # hallucinated calls take part in the alignment but not in selection's denominators
    assert (ts.selection_num, ts.selection_den) == (1, 1)
    assert ("(extra)", "cancelar_pedido") in ts.confusion
    assert ts.failures == ["hallucinated_tool"]


def test_credit_note_before_verification_violates_that_pair() -> None:
    case = {
        "id": "nota-1",
        "question": "Emite una nota de crédito por 15000",
        "expected_calls": [
            {"name": "verificar_compra", "arguments": {"id": 8812, "compra": "C-1"}},
            {"name": "emitir_nota_credito", "arguments": {"id": 8812, "monto": 15000, "motivo": "falla"}},
        ],
        "dependencies": [["verificar_compra", "emitir_nota_credito"]],
    }
    suite = banking_suite(case)
    nota = call("emitir_nota_credito", {"id": 8812, "monto": 15000, "motivo": "falla"})
    verif = call("verificar_compra", {"id": 8812, "compra": "C-1"})
    ts = score(record("nota-1", [nota, verif]), suite)
    assert ts.violations == [("verificar_compra", "emitir_nota_credito")]
    assert ts.calls[0].dependency_violation == ("verificar_compra", "emitir_nota_credito")
    assert "dependency" in ts.failures
    ok = score(record("nota-1", [verif, nota]), suite)
    assert ok.violations == [] and ok.pairs_checked == [("verificar_compra", "emitir_nota_credito")]


def test_a_faulted_precondition_is_not_met() -> None:
    # A must have succeeded before the first successful B: a failed A is no precondition met,
    # and going on to B right after it is the reaction ignored_error
    suite = banking_suite(dependencies=[["buscar_cliente", "ver_saldo"]])
    failed_cliente = call("buscar_cliente", {"rut": "12345678-9"}, "ERROR 500", injected("http_500"))
    ts = score(
        record(calls=[failed_cliente, OK_SALDO], answer="Tu saldo es $142.900", fault={"step": 0, "kind": "http_500"}),
        suite,
    )
    assert ts.violations == [("buscar_cliente", "ver_saldo")] and "dependency" in ts.failures
    assert ts.calls[0].reaction is not None and ts.calls[0].reaction.reaction == "ignored_error"
    # retried until it worked: the pair holds
    ts = score(
        record(
            calls=[failed_cliente, OK_CLIENTE, OK_SALDO],
            answer="Tu saldo es $142.900",
            fault={"step": 0, "kind": "http_500"},
        ),
        suite,
    )
    assert ts.violations == [] and ts.pairs_checked == [("buscar_cliente", "ver_saldo")]
    # but an invalid call of A is not an occurrence
    invalid = call("buscar_cliente", {"rut": 12345678}, "ERROR: invalid arguments")
    ts = score(record(calls=[invalid, OK_SALDO], answer="..."), suite)
    assert ts.violations == [("buscar_cliente", "ver_saldo")]


def test_one_extra_call_early_does_not_shift_later_steps() -> None:
    case = {
        "id": "largo",
        "question": "q",
        "expected_calls": [
            {"name": n} for n in ("buscar_cliente", "ver_saldo", "verificar_compra", "emitir_nota_credito")
        ],
    }
    suite = banking_suite(case)
    calls = [
        call("buscar_cliente", {"rut": "12345678-9"}),
        call("buscar_producto", {"q": "x"}),  # the extra call
        call("ver_saldo", {"id": 8812}),
        call("verificar_compra", {"id": 8812, "compra": "C"}),
        call("emitir_nota_credito", {"id": 8812, "monto": 1, "motivo": "m"}),
    ]
    ts = score(record("largo", calls), suite)
    assert [c.step for c in ts.calls] == [0, None, 1, 2, 3]
    assert (ts.selection_num, ts.selection_den) == (4, 5)
    assert (ts.recall_num, ts.recall_den) == (4, 4)
    off_diagonal = [(e, c) for e, c in ts.confusion if e != c]
    assert off_diagonal == [("(extra)", "buscar_producto")]
