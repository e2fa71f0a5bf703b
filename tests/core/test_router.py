"""The mock router, fault plans, stateful mocks and the agent runner."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.run.router import FAULT_MESSAGES, FaultPlan, FaultSpecError, MockRouter, Toolbox
from app.core.run.runner import recovery_sweep, run_case, run_suite
from app.core.score.scoring import Scorer
from app.core.suites.mocks import ToolFailure
from app.core.suites.tools import Toolset, ToolSpec
from tests.factories import SALDO_CASE, banking_suite


def router(faults: FaultPlan | None = None) -> MockRouter:
    return MockRouter(banking_suite().toolset, faults)


def test_unknown_tool_and_invalid_arguments_come_back_as_errors() -> None:
    r = router()
    assert r.call("cancelar_pedido", {"numero": "PED-1"}) == "ERROR: tool 'cancelar_pedido' does not exist"
    obs = r.call("ver_saldo", {"id": "8812"})
    assert obs == "ERROR: invalid arguments: field 'id': expected integer, got string '8812'"
    assert r.call("ver_saldo", '{"id": 8812}') == '{"saldo": 142900}'  # JSON-string arguments parse
    assert [c.error.kind if c.error else None for c in r.log] == ["unknown_tool", "schema", None]
    assert r.log[2].arguments == {"id": 8812}


def test_fault_by_index() -> None:
    r = router(FaultPlan(by_index={1: "http_503"}))
    r.call("buscar_cliente", {"rut": "12345678-9"})
    assert r.call("ver_saldo", {"id": 8812}) == FAULT_MESSAGES["http_503"]
    assert r.call("ver_saldo", {"id": 8812}) == '{"saldo": 142900}'
    assert r.log[1].error is not None and r.log[1].error.injected
    assert r.first_fault is not None and (r.first_fault.step, r.first_fault.kind) == (1, "http_503")


def test_fault_by_tool_persistent_or_clearing_on_retry() -> None:
    r = router(FaultPlan(by_tool={"ver_saldo": "timeout"}))
    assert r.call("ver_saldo", {"id": 1}) == FAULT_MESSAGES["timeout"]
    assert r.call("ver_saldo", {"id": 1}) == FAULT_MESSAGES["timeout"]
    r = router(FaultPlan(by_tool={"ver_saldo": "timeout"}, clear_on_retry=True))
    assert r.call("ver_saldo", {"id": 1}) == FAULT_MESSAGES["timeout"]
    assert r.call("ver_saldo", {"id": 1}) == '{"saldo": 142900}'
    # a non-transient fault does not clear
    r = router(FaultPlan(by_tool={"ver_saldo": "http_500"}, clear_on_retry=True))
    r.call("ver_saldo", {"id": 1})
    assert r.call("ver_saldo", {"id": 1}) == FAULT_MESSAGES["http_500"]


def test_malformed_fault_is_unparseable() -> None:
    r = router(FaultPlan(by_index={0: "malformed"}))
    obs = r.call("ver_saldo", {"id": 1})
    with pytest.raises(ValueError):
        json.loads(obs)


def test_seeded_probability_repeats() -> None:
    def pattern(seed: int) -> list[bool]:
        r = router(FaultPlan(probability=0.5, kinds=("http_429", "timeout"), seed=seed))
        for _ in range(40):
            r.call("ver_saldo", {"id": 1})
        return [c.error is not None for c in r.log]

    assert pattern(7) == pattern(7)
    assert pattern(7) != pattern(8)
    assert 8 < sum(pattern(7)) < 32


def test_fault_plan_parsing_and_errors() -> None:
    plan = FaultPlan.parse("index:1=http_503,tool:ver_saldo=timeout,p:0.1,kinds:http_429|timeout,seed:7,clear")
    assert plan.by_index == {1: "http_503"} and plan.by_tool == {"ver_saldo": "timeout"}
    assert (plan.probability, plan.kinds, plan.seed, plan.clear_on_retry) == (0.1, ("http_429", "timeout"), 7, True)
    with pytest.raises(FaultSpecError, match="unknown fault kind 'http_418'"):
        FaultPlan.parse("index:0=http_418")
    with pytest.raises(FaultSpecError, match="cannot read"):
        FaultPlan.parse("index:x=timeout")


def test_stateful_mock_with_effects_and_keyed_responses() -> None:
    suite = banking_suite(
        dict(
            SALDO_CASE,
            mocks={
                "ver_saldo": {"responses": [{"when": {"id": 8812}, "response": {"saldo": 5}}]},
            },
        )
    )
    case = suite.cases[0]
    r = MockRouter(suite.toolset, mocks=case.mocks)
    assert r.call("ver_saldo", {"id": 8812}) == '{"saldo": 5}'
    assert r.call("ver_saldo", {"id": 1}) == "ERROR 404: not found"
    assert r.log[1].error is not None and r.log[1].error.kind == "not_found" and not r.log[1].error.injected
    r.call("emitir_nota_credito", {"id": 8812, "monto": 15000, "motivo": "falla"})
    assert r.state == {"notas_credito": [{"id": 8812, "monto": 15000, "motivo": "falla"}]}


def test_python_responder_reads_and_changes_state() -> None:
    def pagar(args: dict[str, Any], state: dict[str, Any]) -> Any:
        if state.get("pagado"):
            raise ToolFailure("http_500", "ERROR 500: ya pagado")
        state["pagado"] = args["monto"]
        return {"ok": True}

    tools = Toolset(
        [ToolSpec("pagar", "Paga", {"type": "object", "properties": {"monto": {"type": "integer"}}}, responder=pagar)]
    )
    r = MockRouter(tools)
    assert r.call("pagar", {"monto": 3}) == '{"ok": true}'
    assert r.call("pagar", {"monto": 3}) == "ERROR 500: ya pagado"
    assert r.state == {"pagado": 3}

    def half_done(args: dict[str, Any], state: dict[str, Any]) -> Any:
        state.setdefault("cobros", []).append(args["monto"])  # changes the state, then fails
        raise ToolFailure("http_500", "ERROR 500: el banco no respondió")

    tools = Toolset(
        [
            ToolSpec(
                "cobrar", "Cobra", {"type": "object", "properties": {"monto": {"type": "integer"}}}, responder=half_done
            )
        ]
    )
    r = MockRouter(tools, state={"cobros": [1]})
    assert r.call("cobrar", {"monto": 3}) == "ERROR 500: el banco no respondió"
    assert r.state == {"cobros": [1]}  # a failed call changes no state


def scripted_agent(question: str, toolbox: Toolbox) -> str:
    """Looks the client up, reads the balance, retries once on an error."""
    assert [t["function"]["name"] for t in toolbox.openai_tools][:2] == ["buscar_cliente", "ver_saldo"]
    cliente = toolbox.call("buscar_cliente", {"rut": "12345678-9"})
    if cliente.startswith("ERROR"):
        return "No pude encontrar al cliente."
    obs = toolbox.call("ver_saldo", {"id": json.loads(cliente)["id"]})
    if obs.startswith("ERROR"):
        obs = toolbox.call("ver_saldo", {"id": 8812})
    if obs.startswith("ERROR"):
        return "No pude consultar el saldo, intenta más tarde."
    return f"Tu saldo es ${json.loads(obs)['saldo']:,}".replace(",", ".")


def test_toolbox_exposes_the_production_contract() -> None:
    suite = banking_suite()
    box = Toolbox(MockRouter(suite.toolset))
    declared = {t["name"]: t for t in suite.toolset.anthropic_tools()}
    assert box.anthropic_tools == list(declared.values())
    assert box.openai_tools[1]["function"]["description"] == suite.toolset.get("ver_saldo").description  # type: ignore[union-attr]


def test_run_case_produces_a_spec_record() -> None:
    suite = banking_suite()
    traj = run_case(scripted_agent, suite, suite.cases[0])
    d = traj.to_dict()
    assert d["answer"] == "Tu saldo es $142.900"
    assert [c["name"] for c in d["calls"]] == ["buscar_cliente", "ver_saldo"]
    assert d["fault"] is None and d["calls"][0]["error"] is None
    assert Scorer(suite).score(traj).passed


def test_async_agents_are_supported() -> None:
    async def agent(question: str, toolbox: Toolbox) -> str:
        await toolbox.acall("buscar_cliente", {"rut": "12345678-9"})
        return "hola"

    suite = banking_suite()
    traj = run_case(agent, suite, suite.cases[0])
    assert traj.answer == "hola" and len(traj.calls) == 1


def test_recovery_sweep_fails_each_expected_step_once() -> None:
    suite = banking_suite()
    trajs = recovery_sweep(scripted_agent, suite, suite.cases[0])
    assert [(t.fault.step, t.fault.kind) for t in trajs if t.fault] == [(0, "http_503"), (1, "http_503")]
    scorer = Scorer(suite)
    outcomes = [scorer.score(t).outcome for t in trajs]
    # step 0: the agent gives up honestly; step 1: it retries and recovers
    assert [o.outcome for o in outcomes if o] == ["gave_up", "recovered"]
    # an honest give-up is acceptable, but the balance was never read: only the recovery passes
    assert [scorer.score(t).passed for t in trajs] == [False, True]


def test_run_suite_trials_and_sweep() -> None:
    suite = banking_suite()
    trajs = list(run_suite(scripted_agent, suite, trials=3, sweep=True))
    assert [(t.trial, t.fault is not None) for t in trajs] == [(0, False), (1, False), (2, False), (3, True), (4, True)]
