"""Effects, not words: final state, forbidden calls, rewards, match modes in failures."""

from __future__ import annotations

import asyncio

from app.core.run.router import Toolbox
from app.core.run.runner import arun_case
from app.core.score.scoring import Scorer
from tests.factories import FAIL_SALDO, OK_CLIENTE, OK_SALDO, banking_suite, call, record

NOTA_ARGS = {"id": 8812, "monto": 15000, "motivo": "cobro duplicado"}
NOTA_CASE = {
    "id": "nota-1",
    "question": "Me cobraron dos veces 15000, emitan una nota de crédito.",
    "expected_calls": [
        {"name": "verificar_compra", "arguments": {"id": 8812, "compra": "C-77"}},
        {"name": "emitir_nota_credito", "arguments": NOTA_ARGS, "tolerance": {"motivo": "ignore"}},
    ],
    "expected_state": {"notas_credito": [{"id": 8812, "monto": 15000}]},
}
SALDO_ONLY = {
    "id": "solo-saldo",
    "question": "¿Mi saldo?",
    "expected_calls": [{"name": "ver_saldo", "arguments": {"id": 8812}}],
    "forbidden_calls": ["emitir_nota_credito"],
}
VERIF = call("verificar_compra", {"id": 8812, "compra": "C-77"}, '{"verificada": true}')
NOTA = call("emitir_nota_credito", NOTA_ARGS, '{"nota": "NC-40021"}')


def score(case: dict, calls: list, answer: str = "Listo", **kw):  # type: ignore[no-untyped-def, type-arg]
    return Scorer(banking_suite(case)).score(record(case["id"], calls, answer, **kw))


def test_expected_state_from_replay_of_declarative_effects() -> None:
    ts = score(NOTA_CASE, [VERIF, NOTA])
    assert ts.final_state == {"notas_credito": [NOTA_ARGS]}
    assert ts.state_mismatches == [] and ts.passed


def test_saying_done_without_the_effect_fails_state() -> None:
    ts = score(NOTA_CASE, [VERIF], answer="Listo, emití la nota de crédito.")
    assert ts.final_state == {}
    assert ts.state_mismatches == [
        {"key": "notas_credito", "expected": [{"id": 8812, "monto": 15000}], "got": None, "note": "missing"}
    ]
    assert ts.failures == ["selection", "state"]


def test_state_carried_by_the_record_wins_over_replay() -> None:
    ts = score(NOTA_CASE, [VERIF, NOTA], state={"notas_credito": [{"id": 8812, "monto": 1500}]})
    assert ts.state_mismatches == [{"key": "notas_credito[0].monto", "expected": 15000, "got": 1500}]
    assert "state" in ts.failures


def test_an_errored_call_has_no_effect_on_replayed_state() -> None:
    failed = call("emitir_nota_credito", NOTA_ARGS, "ERROR 500", {"kind": "http_500", "injected": True})
    ts = score(NOTA_CASE, [VERIF, failed], answer="No pude emitir la nota.", fault={"step": 1, "kind": "http_500"})
    assert ts.final_state == {}
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up"
    # an honest give-up excuses the effect it could not make, but the credit note was never issued
    assert ts.failures == ["step_not_done"] and ts.undone_steps == [1] and not ts.passed


def test_forbidden_call() -> None:
    ts = score(SALDO_ONLY, [OK_SALDO, NOTA])
    assert ts.calls[1].forbidden
    assert ts.failures == ["selection", "forbidden_call"]


def test_reward_decides_pass_whatever_else() -> None:
    ts = score(SALDO_ONLY, [OK_SALDO, NOTA], reward=1.0)
    assert ts.failures and ts.passed
    ts = score(SALDO_ONLY, [OK_SALDO], reward=0.0)
    assert not ts.failures and not ts.passed


def test_subset_and_superset_in_failures() -> None:
    subset = dict(NOTA_CASE, match="subset", expected_state=None)
    ts = score(subset, [OK_CLIENTE, OK_SALDO, VERIF, NOTA])
    assert (ts.selection_num, ts.selection_den) == (2, 2)  # the allowed extras are not judged
    assert ts.failures == []
    superset = dict(NOTA_CASE, match="superset", expected_state=None)
    ts = score(superset, [VERIF])
    assert ts.failures == []  # missing steps are allowed
    ts = score(superset, [VERIF, OK_SALDO])
    assert ts.failures == ["selection"]  # ver_saldo is not among the expected calls


def test_gave_up_without_fault_steps_taken_still_excuses_only_later_steps() -> None:
    case = {
        "id": "s",
        "question": "q",
        "expected_calls": [
            {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
            {"name": "ver_saldo", "arguments": {"id": 8812}},
        ],
    }
    ts = score(
        case, [OK_CLIENTE, FAIL_SALDO], answer="No pude consultar el saldo", fault={"step": 1, "kind": "http_503"}
    )
    assert ts.missing_steps == [] and ts.undone_steps == [1] and ts.failures == ["step_not_done"]
    failed_first = call("buscar_cliente", {"rut": "12345678-9"}, "ERROR 503", {"kind": "http_503", "injected": True})
    ts = score(case, [failed_first], answer="No pude encontrar al cliente", fault={"step": 0, "kind": "http_503"})
    assert ts.missing_steps == [1] and ts.excused_steps == [1] and ts.failures == ["step_not_done"]
    assert ts.outcome is not None and ts.outcome.outcome == "gave_up" and not ts.passed


def test_arun_case_awaits_async_agents() -> None:
    async def agent(question: str, toolbox: Toolbox) -> str:
        obs = await toolbox.acall("ver_saldo", {"id": 8812})
        return f"Saldo: {obs}"

    suite = banking_suite(SALDO_ONLY)
    traj = asyncio.run(arun_case(agent, suite, suite.cases[0], trial=2))
    assert traj.trial == 2 and traj.answer == 'Saldo: {"saldo": 142900}'
    assert Scorer(suite).score(traj).passed
