"""Conversations through the store (SQLite and PostgreSQL), over real HTTP:
the turn of each call is kept, the figures gain ``turns``, the export gives
``turn`` and ``user_error`` back."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.prices import bundled_prices
from app.core.records import parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.usage import UsageTally
from app.settings import Settings
from app.web.app import create_app
from tests.core.test_turns import CARELESS, NOTA, RECOVERED, USER_STOPPED, _suite
from tests.factories import BANKING_TOOLS

SUITE = {"name": "banca-conversaciones", "toolset": BANKING_TOOLS, "cases": [NOTA]}


@pytest.fixture()
def run(db_url: str) -> Iterator[tuple[TestClient, int]]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        rid = c.post("/api/runs", json={"name": "conv", "suite": SUITE}).json()["id"]
        r = c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [RECOVERED, CARELESS, USER_STOPPED]})
        assert r.status_code == 200, r.text
        yield c, rid


def test_stored_conversations_read_like_a_scored_file(run: tuple[TestClient, int]) -> None:
    c, rid = run
    stored = c.get(f"/api/runs/{rid}/figures").json()
    usage = UsageTally()  # as `toollens score --json` builds it
    scored = score_trajectories(
        _suite(), [parse_record(r) for r in (RECOVERED, CARELESS, USER_STOPPED)], usage=usage
    ).to_json()
    scored["usage"] = usage.to_json(bundled_prices())
    assert stored.pop("cases_total") == 3
    assert stored == scored
    assert stored["turns"]["2"]["recovery"] == {"num": 1, "den": 1}
    assert stored["cases"][1]["failures_by_turn"]["2"] == ["hallucinated_tool", "selection"]
    assert stored["cases"][2]["user_error"][0]["kind"] == "stopped_early"


def test_a_conversation_the_user_broke_counts_as_its_row_says_in_the_pass_filter(db_url: str) -> None:
    broken_but_passed = {**RECOVERED, "trial": 3, "user_error": USER_STOPPED["user_error"]}  # outside pass^k
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        rid = c.post("/api/runs", json={"name": "conv", "suite": SUITE}).json()["id"]
        r = c.post(
            f"/api/runs/{rid}/trajectories",
            json={"trajectories": [RECOVERED, CARELESS, USER_STOPPED, broken_but_passed]},
        )
        assert r.status_code == 200, r.text
        for passed, trials in (("true", {0, 3}), ("false", {1, 2})):
            page = c.get(f"/api/runs/{rid}/trajectories", params={"passed": passed})
            assert {t["trial"] for t in page.json()["data"]} == trials
            assert page.json()["count"] == 2, passed  # was 1 and 3: from pass^k's counters


def test_calls_and_expected_steps_carry_their_turn(run: tuple[TestClient, int]) -> None:
    c, rid = run
    ids = {t["trial"]: t["id"] for t in c.get(f"/api/runs/{rid}/trajectories").json()["data"]}
    t = c.get(f"/api/trajectories/{ids[1]}").json()
    assert [(x["name"], x["turn"]) for x in t["calls"]] == [
        ("buscar_cliente", 1),
        ("verificar_compra", 1),
        ("emitir_nota_credito", 1),
        ("cancelar_pedido", 2),
    ]
    assert [(e["name"], e["turn"]) for e in t["expected_calls"]] == [
        ("buscar_cliente", 1),
        ("verificar_compra", 1),
        ("emitir_nota_credito", 2),
    ]
    assert [x["user"] for x in t["detail"]["turns"]] == [NOTA["turns"][0]["user"], "Sí, confirmo"]  # type: ignore[index]


def test_export_gives_turns_and_user_errors_back(run: tuple[TestClient, int]) -> None:
    c, rid = run
    lines = [json.loads(x) for x in c.get(f"/api/runs/{rid}/trajectories.jsonl").text.splitlines()]
    assert [x["turn"] for x in lines[0]["calls"]] == [1, 1, 2, 2]
    assert lines[2]["user_error"] == USER_STOPPED["user_error"]
    # exported, then scored again: the same figures (turns taken from the calls this time)
    again = score_trajectories(_suite(), [parse_record(x) for x in lines]).to_json()
    assert again["turns"] == c.get(f"/api/runs/{rid}/figures").json()["turns"]


def test_a_run_without_conversations_has_no_turns(db_url: str) -> None:
    from tests.factories import examples_client

    with examples_client(db_url, "v1") as c:
        rid = c.get("/api/runs").json()["data"][0]["id"]
        figures = c.get(f"/api/runs/{rid}/figures").json()
        assert "turns" not in figures and figures["user_errors"] == 0
        t = c.get(f"/api/runs/{rid}/trajectories").json()["data"][0]["id"]
        assert all(x["turn"] is None for x in c.get(f"/api/trajectories/{t}").json()["calls"])
