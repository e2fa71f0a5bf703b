"""A failed trajectory's first divergence, on hand-written trajectories: each
kind of divergence, the cases the case allows (never a cause), and one
trajectory counted once, under the first thing that went wrong."""

from __future__ import annotations

from typing import Any

from app.core.reports.report import Report
from app.core.score.divergence import Divergence, cause_key, first_divergence
from app.core.score.scoring import Scorer
from tests.factories import FAIL_SALDO, OK_CLIENTE, OK_SALDO, SALDO_CASE, banking_suite, call, record

NO_DATUM = {k: v for k, v in SALDO_CASE.items() if k != "expected_datum"}
SUBSET = {**NO_DATUM, "id": "subset-001", "match": "subset"}
NOTA = {
    "id": "nota-001",
    "question": "Emite una nota de crédito de 45990 a Ana (12345678-9) por la compra C-9.",
    "expected_calls": [
        {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
        {"name": "verificar_compra", "arguments": {"id": 8812, "compra": "C-9"}},
        {"name": "emitir_nota_credito", "arguments": {"id": 8812, "monto": 45990, "motivo": "duplicado"}},
    ],
    "dependencies": [["verificar_compra", "emitir_nota_credito"]],
    "forbidden_calls": [{"name": "buscar_producto"}],
}
STATE = {
    **NOTA,
    "id": "nota-state",
    "expected_state": {"notas_credito": [{"id": 8812, "monto": 45990}]},
    "forbidden_calls": [],
}
SUITE = banking_suite(NO_DATUM, SUBSET, NOTA, STATE, SALDO_CASE | {"id": "saldo-datum"})
SCORER = Scorer(SUITE)

VERIFY = call("verificar_compra", {"id": 8812, "compra": "C-9"}, '{"verificada": true}')
NOTE = call("emitir_nota_credito", {"id": 8812, "monto": 45990, "motivo": "duplicado"}, '{"nota": "NC-40021"}')


def divergence(case_id: str, calls: list[dict[str, Any]], answer: str = "Listo.", **extra: Any) -> Divergence | None:
    ts = SCORER.score(record(case_id, calls, answer, **extra))
    assert (ts.divergence is None) == ts.passed  # a failed trajectory always has one, a passed one never
    return ts.divergence


def test_a_passed_trajectory_has_none() -> None:
    assert divergence("saldo-001", [OK_CLIENTE, OK_SALDO], "Tu saldo es $142.900.") is None


def test_a_step_never_called() -> None:
    d = divergence("saldo-001", [OK_CLIENTE])
    assert d == Divergence("missing_step", "ver_saldo", step=1)
    assert d.text == "expected call to ver_saldo never made"
    assert d.key == "missing_step:ver_saldo:"


def test_a_missing_step_sits_before_the_next_step_taken() -> None:
    # step 2 (verificar_compra) skipped: it diverged before call #2 took step 3, not at the end
    d = divergence("nota-001", [OK_CLIENTE, NOTE])
    assert d is not None and (d.kind, d.tool, d.step) == ("missing_step", "verificar_compra", 1)


def test_another_tool_in_a_steps_place() -> None:
    d = divergence("saldo-001", [OK_CLIENTE, call("buscar_producto", {"q": "saldo"})])
    assert d == Divergence("wrong_tool", "ver_saldo", "buscar_producto", call=1, step=1)
    assert d.text == "called buscar_producto where ver_saldo was expected"


def test_wrong_values_name_the_tool_and_the_first_field() -> None:
    d = divergence("saldo-001", [OK_CLIENTE, call("ver_saldo", {"id": 9999}, '{"saldo": 0}')])
    assert d == Divergence("arguments", "ver_saldo", "id", call=1, step=1)
    assert d.key == "arguments:ver_saldo:"  # the cause is the tool's, whichever field went wrong
    assert d.text == "ver_saldo never called with the expected values"


def test_a_call_that_breaks_the_schema() -> None:
    d = divergence("saldo-001", [OK_CLIENTE, call("ver_saldo", {"id": "8812"}, "")])
    assert d is not None and (d.kind, d.tool, d.call) == ("schema", "ver_saldo", 1)


def test_a_tool_that_does_not_exist_comes_first_at_its_call() -> None:
    d = divergence("saldo-001", [OK_CLIENTE, call("consultar_saldo", {"id": 8812}), OK_SALDO])
    assert d == Divergence("hallucinated_tool", "consultar_saldo", call=1)


def test_a_forbidden_call() -> None:
    d = divergence("nota-001", [OK_CLIENTE, VERIFY, call("buscar_producto", {"q": "C-9"}), NOTE])
    assert d == Divergence("forbidden_call", "buscar_producto", call=2)


def test_a_call_before_the_one_it_depends_on() -> None:
    # emitir before verificar: the dependency breaks at call #2, before the step order does
    d = divergence("nota-001", [OK_CLIENTE, NOTE, VERIFY])
    assert d is not None and d.call == 1
    assert d.kind in ("dependency", "wrong_tool", "missing_step")
    ts = SCORER.score(record("nota-001", [OK_CLIENTE, NOTE, VERIFY], "Listo."))
    assert "dependency" in ts.failures


def test_an_extra_call_counts_only_where_the_case_allows_none() -> None:
    extra = call("buscar_producto", {"q": "saldo"})
    assert divergence("saldo-001", [OK_CLIENTE, OK_SALDO, extra], "Tu saldo es $142.900.") == Divergence(
        "extra_call", "buscar_producto", call=2
    )
    # under subset the same extra call is allowed: the trajectory passes, no cause at all
    assert divergence("subset-001", [OK_CLIENTE, extra, OK_SALDO], "Tu saldo es $142.900.") is None


def test_the_fault_met_badly() -> None:
    # the only call to ver_saldo failed (injected 503), then the agent stated a balance nothing returned
    d = divergence("saldo-datum", [OK_CLIENTE, FAIL_SALDO], "Tu saldo es $142.900.")
    assert d == Divergence("recovery", "ver_saldo", "hallucinated", call=1)
    assert d.text == "after the error on ver_saldo, answered with data no call returned"


def test_an_honest_give_up_after_the_fault_fails_at_the_error() -> None:
    # acceptable, but the balance was never read: the task failed (step_not_done), sunk by the error
    d = divergence("saldo-datum", [OK_CLIENTE, FAIL_SALDO], "No pude consultar el saldo, intenta más tarde.")
    assert d == Divergence("recovery", "ver_saldo", "gave_up", call=1)
    assert d is not None
    assert d.text == "after the error on ver_saldo, said it could not (an honest give-up, yet the task failed)"


def test_a_final_state_that_differs() -> None:
    wrong_amount = call("emitir_nota_credito", {"id": 8812, "monto": 45990, "motivo": "duplicado"}, "{}")
    ts = SCORER.score(record("nota-state", [OK_CLIENTE, VERIFY, wrong_amount], "Listo.", state={"notas_credito": []}))
    assert ts.divergence == Divergence("state", other="notas_credito")


def test_with_a_reward_a_corrected_mistake_is_no_cause() -> None:
    calls = [OK_CLIENTE, call("ver_saldo", {"id": "8812"}, ""), OK_SALDO]
    # without a reward the scorer fails the call that broke the schema: the cause is that call
    d = divergence("saldo-001", calls, "Tu saldo es $142.900.")
    assert d is not None and (d.kind, d.call) == ("schema", 1)
    # the benchmark says it failed and every step was done right in the end: the reference does not explain it
    d = divergence("saldo-001", calls, "Tu saldo es $142.900.", reward=0.0)
    assert d == Divergence("unexplained", "0")
    assert "reward" in d.text
    # and when the reward says it passed, nothing at all
    assert divergence("saldo-001", calls, "Tu saldo es $142.900.", reward=1.0) is None


def test_with_a_reward_arguments_that_differ_in_a_passed_trajectory_are_no_cause() -> None:
    assert divergence("subset-001", [OK_CLIENTE, call("ver_saldo", {"id": 1}, '{"saldo": 5}')], "5", reward=1.0) is None


def test_one_failed_trajectory_is_counted_once_under_its_first_divergence() -> None:
    report = Report()
    trajectories = [
        # wrong values at call #2, a tool that does not exist at call #3, a missing step after: one cause
        record(
            "nota-001",
            [OK_CLIENTE, call("verificar_compra", {"id": 1, "compra": "C-9"}, "{}"), call("anular_compra", {"id": 1})],
            "Listo.",
        ),
        record("nota-001", [OK_CLIENTE, call("verificar_compra", {"id": 1, "compra": "C-9"}, "{}"), NOTE], "Listo."),
        record("subset-001", [OK_CLIENTE, call("buscar_producto", {"q": "x"}), OK_SALDO], "Tu saldo es $142.900."),
        record("saldo-001", [OK_CLIENTE, OK_SALDO], "Tu saldo es $142.900."),
    ]
    for t in trajectories:
        report.add(SCORER.score(t))
    got = report.to_json()["causes"]
    assert got == [
        {
            "text": "verificar_compra never called with the expected values",
            "count": 2,
            "filter": {"cause": "arguments:verificar_compra:"},
            "kind": "arguments",
            "tool": "verificar_compra",
            "other": "",
        }
    ]
    # counters carry them: a report rebuilt from them says the same
    assert Report.from_counters(report.counters()).to_json()["causes"] == got


def test_keys_escape_their_separator() -> None:
    assert cause_key("hallucinated_tool", "a:b", "") != cause_key("hallucinated_tool", "a", "b")
    assert Divergence("hallucinated_tool", "x" * 1000).cause == ("hallucinated_tool", "x" * 200, "")


def test_first_divergence_of_a_passed_score_is_none() -> None:
    ts = SCORER.score(record("saldo-001", [OK_CLIENTE, OK_SALDO], "Tu saldo es $142.900."))
    assert first_divergence(ts, SUITE.by_id["saldo-001"]) is None


def test_an_honest_give_up_that_the_reward_fails_names_the_error() -> None:
    d = divergence(
        "saldo-datum", [OK_CLIENTE, FAIL_SALDO], "No pude consultar el saldo, intenta más tarde.", reward=0.0
    )
    assert d == Divergence("recovery", "ver_saldo", "gave_up", call=1)


def test_a_step_whose_every_call_failed_outside_any_fault() -> None:
    # two runtime errors on ver_saldo with no fault judged (its outcome is the scorer's to say; here none):
    # the step was never done, since a failed call is never a step done
    failed = call("ver_saldo", {"id": 8812}, "ERROR: timeout", {"kind": "timeout", "message": "timeout"})
    ts = SCORER.score(record("saldo-001", [OK_CLIENTE, failed, failed], "Tu saldo es $142.900."))
    ts.passed, ts.outcome, ts.fault_step = False, None, None
    assert first_divergence(ts, SUITE.by_id["saldo-001"]) == Divergence("step_failed", "ver_saldo", call=1, step=1)


def test_a_call_no_step_expects_is_a_selection_cause_not_its_tools_schema() -> None:
    # the question asks for a balance; the agent calls emitir_nota_credito (no step expects it there) with
    # arguments that break that tool's schema: what sank it is the choice of tool, not the wrong tool's schema
    wrong = call("emitir_nota_credito", {"id": "8812"}, "{}")
    d = divergence("saldo-001", [wrong, OK_CLIENTE, OK_SALDO], "Tu saldo es $142.900.")
    assert d is not None and d.kind in ("extra_call", "wrong_tool") and d.call == 0, d
    assert "schema" not in d.text
