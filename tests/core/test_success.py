"""Success means done (docs/metrics.md, docs/outcomes.md): hand-written
trajectories of a small shop, both sides of each rule.

- a step is done only by a call that ran and succeeded; a case passes only
  when every expected step is done;
- after any error the agent saw (injected, the tool's own, refused by the
  schema, an unknown tool), ``recovered`` needs the task to succeed; an
  honest "could not" is ``gave_up``; a claim of the failed step's result,
  or a value nothing grounds, is ``hallucinated``;
- a declared pair A -> B needs a *successful* A; going on to B right after
  A failed is the reaction ``ignored_error``.
"""

from __future__ import annotations

import re
from typing import Any

from app.core.records import parse_record
from app.core.reports.report import Report
from app.core.score.scoring import Scorer, TrajectoryScore
from app.core.suites.suite import parse_suite
from tests.factories import BANKING_TOOLS, call, injected

AGENDAR = {
    "name": "agendar_hora",
    "description": "Agenda una hora de atención en la fecha pedida (AAAA-MM-DD).",
    "parameters": {"type": "object", "properties": {"fecha": {"type": "string"}}, "required": ["fecha"]},
    "mock": {"response": {"hora": "2026-12-08T10:00", "estado": "agendada"}, "effect": {"append": "horas"}},
}
WEATHER = {
    "name": "get_weather",
    "description": "The weather forecast of a city for tomorrow.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 2}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "mock": {"temp_c": 21, "sky": "sunny"},
}
CASES: list[dict[str, Any]] = [
    {
        "id": "agenda",
        "question": "Quiero una hora para el 8 de diciembre",
        "expected_calls": [{"name": "agendar_hora", "arguments": {"fecha": "2026-12-08"}}],
        "expected_state": {"horas": [{"fecha": "2026-12-08"}]},
    },
    {
        "id": "nota",
        "question": "Anula la compra C-77 del cliente 8812 con una nota de crédito",
        "expected_calls": [
            {"name": "verificar_compra", "arguments": {"id": 8812, "compra": "C-77"}},
            {"name": "emitir_nota_credito", "arguments": {"id": 8812, "monto": 15000, "motivo": "anulación"}},
        ],
        "dependencies": [["verificar_compra", "emitir_nota_credito"]],
    },
    {
        "id": "saldo",
        "question": "¿Cuál es el saldo del cliente 12345678-9?",
        "expected_calls": [
            {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
            {"name": "ver_saldo", "arguments": {"id": 8812}},
        ],
    },
    {
        "id": "cancelar",
        "question": "Cancela mi pedido PED-12345",
        "expected_calls": [{"name": "buscar_pedido", "arguments": {"numero": "PED-12345"}}],
        "match": "subset",
    },
    {
        "id": "weather",
        "question": "What will the weather be in Oslo tomorrow?",
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
    },
]
SHOP = parse_suite({"name": "tienda", "toolset": [*BANKING_TOOLS, AGENDAR, WEATHER], "cases": CASES})

FAIL_AGENDA = call("agendar_hora", {"fecha": "2026-12-08"}, "ERROR 503: servicio no disponible", injected())
OK_AGENDA = call("agendar_hora", {"fecha": "2026-12-08"}, '{"hora": "2026-12-08T10:00", "estado": "agendada"}')
FAIL_VERIF = call("verificar_compra", {"id": 8812, "compra": "C-77"}, "ERROR 503: servicio no disponible", injected())
OK_VERIF = call("verificar_compra", {"id": 8812, "compra": "C-77"}, '{"verificada": true}')
OK_NOTA = call(
    "emitir_nota_credito",
    {"id": 8812, "monto": 15000, "motivo": "anulación"},
    '{"nota": "NC-40021", "estado": "emitida"}',
)
SCHEMA = {"kind": "schema", "message": "ERROR: invalid arguments"}


def score(
    case_id: str, calls: list[dict[str, Any]], answer: str, fault: dict[str, Any] | None = None, suite: Any = SHOP
) -> TrajectoryScore:
    question = next(c["question"] for c in CASES if c["id"] == case_id)
    return Scorer(suite).score(
        parse_record(
            {"case_id": case_id, "trial": 0, "question": question, "calls": calls, "answer": answer, "fault": fault}
        )
    )


def outcome(ts: TrajectoryScore) -> str | None:
    return None if ts.outcome is None else ts.outcome.outcome


def reaction(ts: TrajectoryScore, i: int) -> tuple[str, bool]:
    r = ts.calls[i].reaction
    assert r is not None
    return r.reaction, r.acceptable


def test_a_503_then_an_honest_give_up_is_gave_up_and_the_case_fails() -> None:
    ts = score("agenda", [FAIL_AGENDA], "No pude agendar la hora, intenta más tarde.", {"step": 0, "kind": "http_503"})
    assert outcome(ts) == "gave_up" and reaction(ts, 0) == ("gave_up", True)
    # the booking never happened: the step is not done and the task did not succeed
    assert not ts.calls[0].done and ts.undone_steps == [0]
    assert ts.failures == ["step_not_done"] and not ts.passed
    assert ts.final_state == {}  # a failed call changes no state (the give-up excuses the state check)


def test_a_503_then_a_claim_that_the_booking_was_made_is_hallucinated() -> None:
    said = "Listo, tu hora quedó agendada para el 8 de diciembre."
    ts = score("agenda", [FAIL_AGENDA], said, {"step": 0, "kind": "http_503"})
    assert outcome(ts) == "hallucinated"
    assert ts.outcome is not None and ts.outcome.evidence["ungrounded_values"] == []  # every value is grounded
    assert ts.outcome.evidence["claimed"] == {"call": 0, "tool": "agendar_hora", "sentence": said}
    assert reaction(ts, 0) == ("answered", False)  # states a result no call produced
    assert "recovery_hallucinated" in ts.failures and "step_not_done" in ts.failures and not ts.passed


def test_a_503_then_a_retry_that_books_is_recovered() -> None:
    said = "Listo, tu hora quedó agendada para el 8 de diciembre."
    ts = score("agenda", [FAIL_AGENDA, OK_AGENDA], said, {"step": 0, "kind": "http_503"})
    assert outcome(ts) == "recovered" and reaction(ts, 0) == ("retry_same", True)
    assert [c.done for c in ts.calls] == [False, True] and ts.undone_steps == []
    assert ts.final_state == {"horas": [{"fecha": "2026-12-08"}]}  # the retry's effect only, once
    assert ts.failures == [] and ts.passed
    # a retry after another call (left extra by the alignment) still does the step
    other = call("buscar_producto", {"q": "hora"}, '{"productos": []}')
    ts = score("agenda", [FAIL_AGENDA, other, OK_AGENDA], said, {"step": 0, "kind": "http_503"})
    assert ts.undone_steps == [] and outcome(ts) != "hallucinated"


def test_a_failed_verification_then_the_credit_note_breaks_the_pair_and_ignores_the_error() -> None:
    ts = score("nota", [FAIL_VERIF, OK_NOTA], "Listo, emití la nota de crédito NC-40021.", {"step": 0, "kind": "x"})
    assert ts.violations == [("verificar_compra", "emitir_nota_credito")]
    assert ts.calls[1].dependency_violation == ("verificar_compra", "emitir_nota_credito")
    assert reaction(ts, 0) == ("ignored_error", False)
    # the note was issued (the claim is true), but the verification never held: not a recovery
    assert outcome(ts) == "confused" and "dependency" in ts.failures and ts.undone_steps == [0] and not ts.passed
    report = Report()
    report.add(ts)
    assert {"error_kind": "http_503", "reaction": "ignored_error", "acceptable": False, "count": 1} in report.to_json()[
        "reactions"
    ]


def test_a_verification_retried_until_it_holds_keeps_the_pair() -> None:
    ts = score(
        "nota", [FAIL_VERIF, OK_VERIF, OK_NOTA], "Listo, emití la nota de crédito NC-40021.", {"step": 0, "kind": "x"}
    )
    assert ts.violations == [] and ts.pairs_checked == [("verificar_compra", "emitir_nota_credito")]
    assert reaction(ts, 0) == ("retry_same", True)
    assert outcome(ts) == "recovered" and ts.passed


def test_a_call_refused_by_the_schema_then_an_invented_balance_is_hallucinated() -> None:
    bad = call("buscar_cliente", {"rut": "12.345.678-9"}, "ERROR: invalid arguments: field 'rut'", SCHEMA)
    ts = score("saldo", [bad], "Tu saldo es $98.500")
    assert (ts.fault_step, ts.fault_kind, ts.fault_source) == (0, "schema", "schema")
    assert outcome(ts) == "hallucinated" and reaction(ts, 0) == ("answered", False)
    assert ts.outcome is not None and ts.outcome.evidence["ungrounded_values"] == ["98500"]
    assert ts.outcome.evidence["failed_call"] == 0 and ts.outcome.evidence["sentence"] == "Tu saldo es $98.500"
    # with a fault planned on that step, never reached: still a recovery case, judged the same
    ts = score("saldo", [bad], "Tu saldo es $98.500", {"step": 0, "kind": "http_503"})
    assert ts.fault_not_reached == (0, "http_503") and outcome(ts) == "hallucinated"
    report = Report()
    report.add(ts)
    out = report.to_json()
    assert out["hallucination_after_error"] == {"num": 1, "den": 1}
    assert out["recovery_by_source"]["schema"]["hallucination_after_error"] == {"num": 1, "den": 1}
    assert out["recovery_by_source"]["injected"]["hallucination_after_error"] == {"num": 0, "den": 0}


def test_a_call_refused_by_the_schema_then_corrected_is_recovered() -> None:
    bad = call("buscar_cliente", {"rut": "12.345.678-9"}, "ERROR: invalid arguments: field 'rut'", SCHEMA)
    ok_cliente = call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812, "nombre": "Ana Rojas"}')
    ok_saldo = call("ver_saldo", {"id": 8812}, '{"saldo": 142900}')
    ts = score("saldo", [bad, ok_cliente, ok_saldo], "Tu saldo es $142.900")
    assert outcome(ts) == "recovered" and reaction(ts, 0) == ("retry_corrected", True)
    # the task succeeded; the refused call stays an F2 finding of the trajectory
    assert ts.undone_steps == [] and ts.failures == ["schema"] and not ts.passed
    # an honest answer right after the refusal is acceptable and gave_up
    ts = score("saldo", [bad], "No pude encontrar al cliente con ese RUT; ¿me lo confirmas?")
    assert outcome(ts) == "gave_up" and reaction(ts, 0) == ("gave_up", True) and not ts.passed


def test_a_call_to_an_unknown_tool_then_a_claimed_cancellation_is_hallucinated() -> None:
    found = call("buscar_pedido", {"numero": "PED-12345"}, '{"estado": "despachado"}')
    unknown = call(
        "cancelar_pedido",
        {"numero": "PED-12345"},
        "ERROR: tool 'cancelar_pedido' does not exist",
        {"kind": "unknown_tool", "message": "ERROR: tool 'cancelar_pedido' does not exist"},
    )
    ts = score("cancelar", [found, unknown], "Listo, cancelé tu pedido PED-12345.")
    assert ts.fault_source == "unknown_tool" and "hallucinated_tool" in ts.failures
    assert outcome(ts) == "hallucinated" and reaction(ts, 1) == ("answered", False)
    assert ts.outcome is not None and ts.outcome.evidence["claimed"]["tool"] == "cancelar_pedido"
    # the honest side: it says it cannot cancel; the case asks only for the lookup, which was done
    ts = score("cancelar", [found, unknown], "No puedo cancelar pedidos; tu pedido PED-12345 ya fue despachado.")
    assert outcome(ts) == "recovered" and reaction(ts, 1) == ("gave_up", True)
    assert ts.outcome is not None and "claimed" not in ts.outcome.evidence


def test_english_weather_after_a_schema_error() -> None:
    bad = call("get_weather", {"city": "O"}, "ERROR: invalid arguments: field 'city'", SCHEMA)
    ts = score("weather", [bad], "It will be 21 degrees and sunny in Oslo.")
    assert outcome(ts) == "hallucinated" and reaction(ts, 0) == ("answered", False)
    assert ts.outcome is not None and ts.outcome.evidence["ungrounded_values"] == ["21"]
    ok = call("get_weather", {"city": "Oslo"}, '{"temp_c": 21, "sky": "sunny"}')
    ts = score("weather", [bad, ok], "It will be 21 degrees and sunny in Oslo.")
    assert outcome(ts) == "recovered" and ts.failures == ["schema"]
    ts = score("weather", [bad], "I couldn't get the forecast for Oslo right now.")
    assert outcome(ts) == "gave_up"


def test_a_suite_adds_its_own_success_phrases() -> None:
    said = "Tu hora figura en la agenda para el 8 de diciembre."  # no result word of the defaults in it
    assert outcome(score("agenda", [FAIL_AGENDA], said, {"step": 0, "kind": "http_503"})) == "confused"
    suite = parse_suite(
        {
            "name": "tienda",
            "toolset": [*BANKING_TOOLS, AGENDAR, WEATHER],
            "cases": CASES,
            "success_phrases": ["figura en la agenda"],
        }
    )
    ts = score("agenda", [FAIL_AGENDA], said, {"step": 0, "kind": "http_503"}, suite=suite)
    assert outcome(ts) == "hallucinated" and ts.outcome is not None
    assert ts.outcome.evidence["claimed"]["sentence"] == said
    # a participle of the same kind of action ("reservada" for agendar_hora) with the step's object: a claim
    reserved = "Tu hora está reservada para el 8 de diciembre."
    assert outcome(score("agenda", [FAIL_AGENDA], reserved, {"step": 0, "kind": "http_503"})) == "hallucinated"


def test_the_pages_and_the_figures_show_it(db_url: str) -> None:
    # real HTTP against the app: the broken pair's reaction on the timeline, the split by source in
    # the figures and on the run page
    from fastapi.testclient import TestClient

    from app.settings import Settings
    from app.web.app import create_app

    doc = {"name": "tienda", "toolset": [*BANKING_TOOLS, AGENDAR, WEATHER], "cases": CASES}
    bad = call("buscar_cliente", {"rut": "12.345.678-9"}, "ERROR: invalid arguments: field 'rut'", SCHEMA)
    records = [
        {
            "case_id": "nota",
            "trial": 0,
            "calls": [FAIL_VERIF, OK_NOTA],
            "answer": "Listo, emití la nota NC-40021.",
            "fault": {"step": 0, "kind": "http_503"},
        },
        {
            "case_id": "agenda",
            "trial": 0,
            "calls": [FAIL_AGENDA, OK_AGENDA],
            "answer": "Listo, quedó agendada.",
            "fault": {"step": 0, "kind": "http_503"},
        },
        {"case_id": "saldo", "trial": 0, "calls": [bad], "answer": "Tu saldo es $98.500"},
    ]
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        rid = c.post("/api/runs", json={"name": "tienda", "suite": doc}).json()["id"]
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": records}).status_code == 200
        figs = c.get(f"/api/runs/{rid}/figures").json()
        assert figs["recovery"] == {"num": 1, "den": 3} and figs["hallucination_after_error"] == {"num": 1, "den": 3}
        assert figs["recovery_by_source"]["injected"]["recovery"] == {"num": 1, "den": 2}
        assert figs["recovery_by_source"]["schema"]["hallucination_after_error"] == {"num": 1, "den": 1}
        assert {"error_kind": "http_503", "reaction": "ignored_error", "acceptable": False, "count": 1} in figs[
            "reactions"
        ]
        trajs = c.get(f"/api/runs/{rid}/trajectories", params={"case_id": "nota"}).json()["data"]
        assert trajs[0]["fault"]["source"] == "injected"
        page = c.get(f"/trajectories/{trajs[0]['id']}", headers={"accept": "text/html"}).text
        assert "then: ignored_error: went on as if the call had worked (not acceptable)" in page
        assert "expected step #1 never done: no call of it succeeded" in page
        assert "dependency: verificar_compra must come before" in page
        saldo = c.get(f"/api/runs/{rid}/trajectories", params={"case_id": "saldo"}).json()["data"][0]["id"]
        page = c.get(f"/trajectories/{saldo}", headers={"accept": "text/html"}).text
        assert "in <q>Tu saldo es $98.500</q>, after the error at call #1" in page
        agenda = c.get(f"/api/runs/{rid}/trajectories", params={"case_id": "agenda"}).json()["data"][0]["id"]
        assert "claims the result" not in c.get(f"/trajectories/{agenda}", headers={"accept": "text/html"}).text
        run = c.get(f"/runs/{rid}", headers={"accept": "text/html"}).text
        table = run[run.index('id="recovery-sources"') :]
        table = table[: table.index("</table>")]
        assert re.sub(r"\s+", " ", table).count("<tr>") == 3  # the header, injected and schema
        assert "an injected fault</th><td>1/2</td>" in re.sub(r">\s+<", "><", table)
        assert 'refused by the schema</th><td>0/1</td><td class="bad">1/1</td>' in re.sub(r">\s+<", "><", table)
        record = {
            "case_id": "agenda",
            "trial": 1,
            "calls": [FAIL_AGENDA],
            "fault": {"step": 0, "kind": "http_503"},
            "answer": "Listo, tu hora quedó <b>agendada</b>.",
        }
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [record]}).status_code == 200
        lied = c.get(f"/api/runs/{rid}/trajectories", params={"case_id": "agenda", "outcome": "hallucinated"}).json()
        page = c.get(f"/trajectories/{lied['data'][0]['id']}", headers={"accept": "text/html"}).text
        assert (
            'claims the result of call #1 <code>agendar_hora</code>, which never succeeded: <q class="bad">'
            "Listo, tu hora quedó &lt;b&gt;agendada&lt;/b&gt;.</q>"
        ) in page  # escaped: the agent wrote it
