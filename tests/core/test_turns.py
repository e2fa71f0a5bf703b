"""Conversations: alignment within each turn, the families per turn and per
conversation, a fault in turn 2, and the simulated user's faults left out.
Every figure below is computed by hand from the records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import InvalidTrajectory
from app.core.records import call_turns, parse_record, user_turns
from app.core.reports.evaluate import score_trajectories
from app.core.reports.report import Report
from app.core.score.scoring import Scorer
from app.core.score.turns import CALLS, FAILED, HALLUCINATED, TRAJECTORIES, WIDTH, TurnTable
from app.core.suites.suite import Suite, parse_suite
from app.importers import convert
from app.importers.base import Options
from tests.factories import banking_suite, call, injected
from tests.resources import DATA, shared_data

NOTA = {
    "id": "nota-002",
    "turns": [
        {
            "user": "Quiero una nota de crédito por la compra PED-1; mi RUT es 12345678-9",
            "expected_calls": [
                {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
                {"name": "verificar_compra", "arguments": {"id": 8812, "compra": "PED-1"}},
            ],
            "forbidden_calls": ["emitir_nota_credito"],
        },  # not before the user confirms
        {
            "user": "Sí, confirmo",
            "expected_calls": [
                {
                    "name": "emitir_nota_credito",
                    "arguments": {"id": 8812, "monto": 15000},
                    "tolerance": {"motivo": "ignore"},
                }
            ],
        },
    ],
    "dependencies": [["verificar_compra", "emitir_nota_credito"]],
    "expected_datum": "NC-40021",
}
FIRST, CONFIRM = NOTA["turns"][0]["user"], NOTA["turns"][1]["user"]  # type: ignore[index]
EMITIR = {"id": 8812, "monto": 15000, "motivo": "devolución"}
NOTA_OK = '{"nota": "NC-40021", "estado": "emitida"}'


def _suite() -> Suite:
    return banking_suite(NOTA)


def _conversation(
    trial: int, calls: list[dict[str, Any]], confirm_at: int, answer: str, **extra: Any
) -> dict[str, Any]:
    return {
        "case_id": "nota-002",
        "trial": trial,
        "question": FIRST,
        "calls": calls,
        "answer": answer,
        "messages": [
            {"role": "user", "content": FIRST, "calls_before": 0},
            {"role": "assistant", "content": "¿Confirma la nota de crédito por $15.000?", "calls_before": confirm_at},
            {"role": "user", "content": CONFIRM, "calls_before": confirm_at},
            {"role": "assistant", "content": answer, "calls_before": len(calls)},
        ],
        **extra,
    }


# trial 0: both turns right; the first emission in turn 2 fails (503), the retry works
RECOVERED = _conversation(
    0,
    [
        call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812}'),
        call("verificar_compra", {"id": 8812, "compra": "PED-1"}, '{"verificada": true}'),
        call("emitir_nota_credito", EMITIR, "ERROR 503: servicio no disponible", injected()),
        call("emitir_nota_credito", EMITIR, NOTA_OK),
    ],
    confirm_at=2,
    answer="Listo: nota de crédito NC-40021 emitida.",
    fault={"step": 2, "kind": "http_503"},
)
# trial 1: turn 1 checks the wrong purchase and emits before the confirmation; turn 2 calls an invented tool
CARELESS = _conversation(
    1,
    [
        call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812}'),
        call("verificar_compra", {"id": 8812, "compra": "PED-2"}, '{"verificada": true}'),
        call("emitir_nota_credito", EMITIR, NOTA_OK),
        call("cancelar_pedido", {"numero": "PED-1"}, "unknown tool"),
    ],
    confirm_at=3,
    answer="Listo, NC-40021.",
)
# trial 2: the simulated user stopped before confirming: its fault, not the agent's
USER_STOPPED = {
    "case_id": "nota-002",
    "trial": 2,
    "question": FIRST,
    "calls": [call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812}')],
    "answer": "",
    "messages": [{"role": "user", "content": FIRST, "calls_before": 0}],
    "user_error": [{"kind": "stopped_early", "detail": "said ###STOP### before confirming"}],
}


def _fig(*pairs: tuple[int, int]) -> dict[str, dict[str, int]]:
    names = (
        "selection_precision",
        "selection_recall",
        "schema_validity",
        "argument_accuracy",
        "hallucinated_tools",
        "recovery",
        "hallucination_after_error",
    )
    return {n: {"num": a, "den": b} for n, (a, b) in zip(names, pairs, strict=True)}


def test_turns_of_calls_come_from_the_user_messages_or_from_the_calls() -> None:
    assert call_turns(parse_record(RECOVERED)) == [1, 1, 2, 2]
    assert call_turns(parse_record(CARELESS)) == [1, 1, 1, 2]
    explicit = {
        **CARELESS,
        "messages": None,
        "calls": [{**c, "turn": t} for c, t in zip(CARELESS["calls"], [1, 1, 1, 2], strict=True)],
    }
    assert call_turns(parse_record(explicit)) == [1, 1, 1, 2]
    # a call without its own turn takes the previous call's
    partial = {
        **explicit,
        "calls": [
            {**c, "turn": 2} if i == 3 else {k: v for k, v in c.items() if k != "turn"}
            for i, c in enumerate(explicit["calls"])
        ],
    }
    assert call_turns(parse_record(partial)) == [1, 1, 1, 2]
    assert call_turns(parse_record({"case_id": "x", "calls": [call("ver_saldo")]})) is None
    assert (
        call_turns(
            parse_record(
                {
                    "case_id": "x",
                    "calls": [call("ver_saldo")],
                    "messages": [{"role": "user", "content": "q", "calls_before": 0}],
                }
            )
        )
        is None
    )


def test_explicit_turns_score_exactly_as_derived_ones() -> None:
    explicit = {
        **CARELESS,
        "messages": None,
        "calls": [{**c, "turn": t} for c, t in zip(CARELESS["calls"], [1, 1, 1, 2], strict=True)],
    }
    a = Scorer(_suite()).score(parse_record(CARELESS)).summary()
    b = Scorer(_suite()).score(parse_record(explicit)).summary()
    assert a["turns"][0]["figures"] == b["turns"][0]["figures"]
    assert a["turns"][1]["figures"] == b["turns"][1]["figures"]
    assert b["turns"][1]["user"] == CONFIRM  # no messages: the scripted turn's text


def test_two_turn_conversation_with_a_fault_in_turn_2_by_hand() -> None:
    scorer = Scorer(_suite())
    ok = scorer.score(parse_record(RECOVERED))
    # the retry collapses onto the turn-2 step; the fault sits in turn 2 and is recovered from
    assert [(c.turn, c.step, c.selection_ok) for c in ok.calls] == [
        (1, 0, True),
        (1, 1, True),
        (2, 2, True),
        (2, 2, True),
    ]
    assert ok.fault_dict() == {"step": 2, "kind": "http_503", "turn": 2, "source": "injected"}
    assert ok.outcome is not None and ok.outcome.outcome == "recovered"
    assert ok.passed and ok.failures == [] and ok.step_turns == [1, 1, 2]
    assert [t.figures() for t in ok.turns or []] == [
        _fig((2, 2), (2, 2), (2, 2), (2, 2), (0, 2), (0, 0), (0, 0)),
        _fig((2, 2), (1, 1), (2, 2), (2, 2), (0, 2), (1, 1), (0, 1)),
    ]

    bad = scorer.score(parse_record(CARELESS))
    # turn 1: the emission is an extra call there, and forbidden before the confirmation;
    # turn 2: the invented tool takes the emission's place, which stays missing
    assert [(c.turn, c.step, c.selection_ok, c.forbidden) for c in bad.calls] == [
        (1, 0, True, False),
        (1, 1, True, False),
        (1, None, False, True),
        (2, 2, None, False),
    ]
    assert bad.missing_steps == [2]
    assert bad.failures == ["selection", "arguments", "hallucinated_tool", "forbidden_call"]
    assert [(t.turn, t.user, t.failures) for t in bad.turns or []] == [
        (1, FIRST, ["arguments", "selection", "forbidden_call"]),
        (2, CONFIRM, ["hallucinated_tool", "selection"]),
    ]
    assert [t.figures() for t in bad.turns or []] == [
        _fig((2, 3), (2, 2), (3, 3), (1, 2), (0, 3), (0, 0), (0, 0)),
        _fig((0, 0), (0, 1), (0, 0), (0, 0), (1, 1), (0, 0), (0, 0)),
    ]
    # the conversation is the sum of its turns
    assert (bad.selection_num, bad.selection_den, bad.recall_num, bad.recall_den) == (2, 3, 2, 3)
    assert (bad.args_num, bad.args_den, bad.hallucinated_num, bad.calls_total) == (1, 2, 1, 4)


def test_the_turn_table_is_one_flat_list_read_back_as_turns() -> None:
    """No object per turn: the figures of the careless conversation above sit in one list,
    WIDTH slots a turn, and read back as the same TurnScores; a table made of TurnScores
    (TurnTable.of) holds the same counts."""
    bad = Scorer(_suite()).score(parse_record(CARELESS))
    table = bad.turns
    assert isinstance(table, TurnTable) and len(table) == 2 and len(table.counts) == 2 * WIDTH
    assert table.failures == {1: ["arguments", "selection", "forbidden_call"], 2: ["hallucinated_tool", "selection"]}
    second = table.counts[WIDTH:]
    assert second[TRAJECTORIES] == 1 and second[FAILED] == 1 and second[CALLS] == 1 and second[HALLUCINATED] == 1
    assert table[-1].turn == 2 and table[-1].calls_total == 1 and table[-1].recall_den == 1
    again = TurnTable.of(list(table))
    assert again.counts == table.counts and again.failures == table.failures and again.users == table.users


def test_run_figures_per_turn_and_per_conversation_by_hand() -> None:
    report = score_trajectories(_suite(), [parse_record(r) for r in (RECOVERED, CARELESS, USER_STOPPED)])
    out = report.to_json()
    # per conversation: turn 1 (2+3 calls) and turn 2 (2+1 calls) added up
    assert {k: out[k] for k in _fig(*[(0, 0)] * 7)} == _fig((6, 7), (5, 6), (7, 7), (5, 6), (1, 8), (1, 1), (0, 1))
    assert out["turns"] == {
        "1": {
            **_fig((4, 5), (4, 4), (5, 5), (3, 4), (0, 5), (0, 0), (0, 0)),
            "trajectories": 2,
            "failed": 1,
            "failures": {"arguments": 1, "forbidden_call": 1, "selection": 1},
        },
        "2": {
            **_fig((2, 2), (1, 2), (2, 2), (2, 2), (1, 3), (1, 1), (0, 1)),
            "trajectories": 2,
            "failed": 1,
            "failures": {"hallucinated_tool": 1, "selection": 1},
        },
    }
    # pass^k counts conversations; the one the user broke is listed, flagged, and not counted
    assert out["pass_hat_k"] == {"1": 0.5, "2": 0.0}
    assert out["trajectories"] == 3 and out["user_errors"] == 1
    assert out["failures"] == {"arguments": 1, "forbidden_call": 1, "hallucinated_tool": 1, "selection": 1}
    cases = {c["trial"]: c for c in out["cases"]}
    assert cases[0]["fault"] == {"step": 2, "kind": "http_503", "turn": 2, "source": "injected"}
    assert cases[0]["failures_by_turn"] == {}
    assert cases[1]["failures_by_turn"] == {
        "1": ["arguments", "selection", "forbidden_call"],
        "2": ["hallucinated_tool", "selection"],
    }
    assert cases[2]["user_error"] == [{"kind": "stopped_early", "detail": "said ###STOP### before confirming"}]
    # what a store keeps (counters) gives the same turns back
    again = Report.from_counters(report.counters()).to_json()
    assert again["turns"] == out["turns"] and again["user_errors"] == 1


def test_a_single_question_case_reports_no_turns() -> None:
    from tests.factories import OK_CLIENTE, OK_SALDO, record

    out = score_trajectories(banking_suite(), [record(calls=[OK_CLIENTE, OK_SALDO])]).to_json()
    assert "turns" not in out and "failures_by_turn" not in out["cases"][0]
    assert "turn" not in json.dumps(Scorer(banking_suite()).score(record(calls=[OK_CLIENTE])).to_dict()["calls"])


def test_a_simulated_user_case_aligns_the_whole_conversation() -> None:
    case = {
        "id": "saldo-rut",
        "question": "Quiero saber mi saldo",
        "user": {"instruction": "Eres Ana; quieres tu saldo.", "known": {"rut": "12345678-9"}},
        "expected_calls": [
            {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
            {"name": "ver_saldo", "arguments": {"id": 8812}},
        ],
    }
    rec = {
        "case_id": "saldo-rut",
        "question": "Quiero saber mi saldo",
        "answer": "No pude ver el saldo.",
        "calls": [call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812}')],
        "messages": [
            {"role": "user", "content": "Quiero saber mi saldo", "calls_before": 0},
            {"role": "assistant", "content": "¿Cuál es su RUT?", "calls_before": 0},
            {"role": "user", "content": "12345678-9", "calls_before": 0},
        ],
    }
    ts = Scorer(banking_suite(case)).score(parse_record(rec))
    # the call answers turn 2; the step never taken was still not taken when the conversation ended (turn 2)
    assert [c.turn for c in ts.calls] == [2] and ts.step_turns == [2, 2]
    assert [(t.turn, t.recall_num, t.recall_den, t.failures) for t in ts.turns or []] == [
        (1, 0, 0, []),
        (2, 1, 2, ["selection"]),
    ]
    # a step skipped before a step taken belongs to the turn of the one taken
    rec["messages"] = [
        *rec["messages"],
        {"role": "assistant", "content": "ok", "calls_before": 0},
        {"role": "user", "content": "gracias", "calls_before": 0},
    ]
    rec["calls"] = [call("ver_saldo", {"id": 8812}, '{"saldo": 142900}')]
    rec["messages"][4]["calls_before"] = 1  # turn 3 starts after the call: the call answers turn 2
    ts = Scorer(banking_suite(case)).score(parse_record(rec))
    assert ts.step_turns == [2, 2] and [t.recall_den for t in ts.turns or []] == [0, 2, 0]
    rec["calls"] = []
    rec["messages"][4]["calls_before"] = 0
    ts = Scorer(banking_suite(case)).score(parse_record(rec))
    assert ts.step_turns == [3, 3]  # none taken: both go to the last turn


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"user_error": {"kind": "x"}}, "user_error"),
        ({"user_error": [{"kind": ""}]}, "user_error[0].kind"),
        ({"user_error": [{"kind": "stopped_early", "detail": "x" * 3000}]}, "user_error[0].detail"),
        ({"user_error": [{"kind": "k"}] * 21}, "user_error"),
        ({"calls": [{"name": "a", "turn": 0}]}, "calls[0].turn"),
        ({"calls": [{"name": "a", "turn": "2"}]}, "calls[0].turn"),
        ({"calls": [{"name": "a", "turn": 1001}]}, "calls[0].turn"),  # per-turn figures stay bounded
    ],
)
def test_turn_and_user_error_are_bounded(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTrajectory) as info:
        parse_record({"case_id": "x", **extra})
    assert info.value.field == field


def test_a_thousand_turns_at_most() -> None:
    messages = [{"role": "user", "content": f"m{i}", "calls_before": i} for i in range(1500)]
    rec = parse_record({"case_id": "x", "calls": [call("ver_saldo", {"id": 1})] * 1500, "messages": messages})
    turns = call_turns(rec)
    assert turns is not None and turns[998:1001] == [999, 1000, 1000] and turns[-1] == 1000
    ts = Scorer(banking_suite()).score(rec)
    assert len(ts.turns or []) == 1000 and (ts.turns or [])[-1].calls_total == 501


def test_turn_and_user_error_go_back_out(tmp_path: Path) -> None:
    rec = parse_record({**USER_STOPPED, "calls": [{**USER_STOPPED["calls"][0], "turn": 1}]})
    out = rec.to_dict()
    assert out["calls"][0]["turn"] == 1 and out["user_error"][0]["kind"] == "stopped_early"
    assert parse_record(out).to_dict() == out


TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
TAU_TOOLS = DATA / "tau_bench_tool_schemas_airline_retail.json"


@shared_data(TAU, TAU_TOOLS)
def test_tau_bench_runs_are_conversations_with_their_user_turns() -> None:
    conversion = convert("tau-bench", TAU, Options(tools=TAU_TOOLS))
    trajs = [t for _, t in conversion.records() if not isinstance(t, InvalidTrajectory)]
    assert len(trajs) == 100 and all(len(user_turns(t)) >= 3 for t in trajs)
    first = next(t for t in trajs if t.case_id == "task-0" and t.trial == 0)
    # read in the file: the user gives the trip, then the user id, then the details; the agent calls from turn 3
    assert user_turns(first)[1] == "Sure, my user ID is mia_li_3668."
    assert call_turns(first) == [3, 3, 4, 5, 6, 6, 6, 7]
    out = score_trajectories(parse_suite(conversion.suite), trajs).to_json()
    assert out["pass_hat_k"] == {"1": 0.31, "2": 0.1933, "3": 0.17, "4": 0.16}  # still tau-bench's own
    # gpt-4o never calls a tool before the user's second message
    assert out["turns"]["1"]["trajectories"] == 100 and out["turns"]["1"]["hallucinated_tools"]["den"] == 0
    assert sum(t["hallucinated_tools"]["den"] for t in out["turns"].values()) == out["hallucinated_tools"]["den"]


def test_toollens_score_reports_the_turns(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli
    from tests.store.test_turns_store import SUITE

    suite, trajs = tmp_path / "suite.json", tmp_path / "t.jsonl"
    suite.write_text(json.dumps(SUITE))
    trajs.write_text("".join(json.dumps(r) + "\n" for r in (RECOVERED, CARELESS, USER_STOPPED)))
    out = json.loads(CliRunner().invoke(cli, ["score", str(suite), str(trajs), "--json"]).stdout)
    assert out["turns"]["2"]["recovery"] == {"num": 1, "den": 1} and out["user_errors"] == 1
    text = CliRunner().invoke(cli, ["score", str(suite), str(trajs)], env={"COLUMNS": "160"}).stdout
    assert "By user turn" in text and "1 conversations broken by the simulated user" in text
    row = next(line for line in text.splitlines() if line.strip("│ ").startswith("2 "))
    assert "1/3" in row and "hallucinated_tool 1, selection 1" in row
