"""Conversations on the pages, over real HTTP on both databases: the timeline
grouped by user turn under what the user said (escaped), the run page's and
the compare page's per-turn tables, shown only for runs with conversations."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from app.store.views import RatioPublic, TurnFigures
from app.web.app import create_app
from app.web.pages.run import TURN_COLUMNS, fold_turns
from tests.core.test_turns import CARELESS, RECOVERED, USER_STOPPED
from tests.store.test_turns_store import SUITE

HTML = {"accept": "text/html"}
EVIL = "<img src=x onerror=alert(1)> Sí, confirmo"


class Turns(HTMLParser):
    """Each ``section.turn`` of the timeline: its heading, what the user said, and its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[dict[str, Any]] = []
        self.tags: list[str] = []
        self._depth = 0  # open <section> tags inside the current turn
        self._where = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "section" and a.get("class") == "turn":
            self.turns.append({"id": a.get("id"), "h": "", "user": "", "agent": "", "calls": [], "rows": 0})
            self._depth = 1
            return
        if not self._depth:
            return
        if tag == "section":
            self._depth += 1
        elif tag == "h3":
            self._where = "h"
        elif tag == "blockquote":
            self._where = "user" if a.get("class") == "user-says" else "agent"
        elif tag == "li" and (a.get("class") or "").startswith("step"):
            self.turns[-1]["rows"] += 1
        elif tag == "code" and self._where == "" and a.get("class") in ("", None, "bad") and self.turns[-1]["rows"]:
            self._where = "code"

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._depth:
            self._depth -= 1
        elif tag in ("h3", "blockquote") or (tag == "code" and self._where == "code"):
            self._where = ""

    def handle_data(self, data: str) -> None:
        if not self._depth or not self._where:
            return
        t = self.turns[-1]
        if self._where == "code":
            t["calls"].append(data)
        else:
            t[self._where] += data


def turns_of(text: str) -> Turns:
    p = Turns()
    p.feed(text)
    return p


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        evil = {
            **CARELESS,
            "trial": 3,
            "messages": [m if m["content"] != "Sí, confirmo" else {**m, "content": EVIL} for m in CARELESS["messages"]],
        }
        for name, recs in (("conv", [RECOVERED, CARELESS, USER_STOPPED, evil]), ("conv-b", [RECOVERED])):
            rid = c.post("/api/runs", json={"name": name, "suite": SUITE}).json()["id"]
            assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
        yield c


def _id(c: TestClient, trial: int) -> int:
    return int(next(t["id"] for t in c.get("/api/runs/1/trajectories").json()["data"] if t["trial"] == trial))


def test_the_timeline_groups_calls_under_each_user_turn(client: TestClient) -> None:
    text = client.get(f"/trajectories/{_id(client, 1)}", headers=HTML).text
    page = turns_of(text)
    assert [t["id"] for t in page.turns] == ["turn-1", "turn-2"]
    first, second = page.turns
    assert first["user"].strip() == "user " + str(SUITE["cases"][0]["turns"][0]["user"])  # type: ignore[index]
    assert second["user"].strip() == "user Sí, confirmo"
    assert first["agent"].strip() == "agent ¿Confirma la nota de crédito por $15.000?"
    # turn 1: the two lookups and the emission made before the confirmation; turn 2: the invented tool,
    # and the emission expected there never done
    assert [c for c in first["calls"] if c in ("buscar_cliente", "verificar_compra", "emitir_nota_credito")] == [
        "buscar_cliente",
        "buscar_cliente",
        "verificar_compra",
        "verificar_compra",
        "emitir_nota_credito",
    ]
    assert "cancelar_pedido" in second["calls"] and "emitir_nota_credito" in second["calls"]
    assert "forbidden_call" in first["h"] and "hallucinated_tool" in second["h"] and "forbidden_call" not in second["h"]


def test_what_the_user_said_is_escaped(client: TestClient) -> None:
    text = client.get(f"/trajectories/{_id(client, 3)}", headers=HTML).text
    assert EVIL not in text and html.escape(EVIL, quote=False) in text
    assert "img" not in turns_of(text).tags


def test_a_user_error_is_flagged_on_the_timeline_and_the_run(client: TestClient) -> None:
    text = client.get(f"/trajectories/{_id(client, 2)}", headers=HTML).text
    assert "The simulated user broke this conversation" in text and "stopped_early" in text
    run = client.get("/runs/1", headers=HTML).text
    assert "1 conversation broken by the simulated user" in run


def test_the_run_page_shows_where_failures_happen_by_turn(client: TestClient) -> None:
    run = client.get("/runs/1", headers=HTML).text
    assert 'id="turns"' in run and 'href="#turns"' in run
    table = run[run.index('id="turns"') : run.index("</section>", run.index('id="turns"'))]
    rows = table.split("<tr>")[2:]
    # conversations 2 (CARELESS and its escaped copy) failed in both turns; RECOVERED in none
    two_of_three = '<meter min="0" max="3" low="0" high="0" optimum="0" value="2"></meter> 2'
    assert two_of_three in rows[0] and two_of_three in rows[1]
    assert "<code>forbidden_call</code></a> 2" in rows[0] and "forbidden_call" not in rows[1]
    # turn 2: recovered 1 of 1 (RECOVERED's 503)
    assert 'title="1 of 1"' in rows[1]
    compare = client.get("/compare", params={"a": 1, "b": 2}, headers=HTML).text
    section = compare[compare.index('id="turns"') : compare.index("</section>", compare.index('id="turns"'))]
    assert "2 of 3" in section and "0 of 1" in section


def test_pages_without_conversations_show_no_turns(db_url: str) -> None:
    from tests.factories import examples_client

    with examples_client(db_url, "v1", "banca-v2") as c:
        assert 'id="turns"' not in c.get("/runs/1", headers=HTML).text
        assert 'id="turns"' not in c.get("/compare", params={"a": 1, "b": 2}, headers=HTML).text
        t = c.get("/api/runs/1/trajectories").json()["data"][0]["id"]
        text = c.get(f"/trajectories/{t}", headers=HTML).text
        assert '<ol class="timeline" id="timeline">' in text and 'class="turn"' not in text


def test_turns_where_nothing_happened_fold_into_one_line(client: TestClient) -> None:
    """RECOVERED, then four more exchanges of thanks without a call: turns 1 and 2 as before, turns
    3 to 6 (no call, no failure) one line; a lone quiet turn between two busy ones stays a row."""
    thanks = [
        m
        for i in range(4)
        for m in (
            {"role": "user", "content": f"gracias {i}", "calls_before": 4},
            {"role": "assistant", "content": "de nada", "calls_before": 4},
        )
    ]
    chatty = {**RECOVERED, "messages": [*RECOVERED["messages"], *thanks]}
    rid = client.post("/api/runs", json={"name": "chatty", "suite": SUITE}).json()["id"]
    assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [chatty]}).status_code == 200
    assert sorted(client.get(f"/api/runs/{rid}/figures").json()["turns"], key=int) == ["1", "2", "3", "4", "5", "6"]
    run = client.get(f"/runs/{rid}", headers=HTML).text
    table = run[run.index('id="turns"') : run.index("</section>", run.index('id="turns"'))]
    heads = re.findall(r'<th scope="row">(.*?)</th>', table)
    assert heads == ["1", "2", "3–6"]
    quiet = re.search(r'<tr class="quiet">(.*?)</tr>', table, re.S)
    assert quiet is not None and "turns 3–6: nothing happened" in quiet.group(1)
    assert "<td>1</td>" in quiet.group(1)  # the one conversation reached all four


def test_fold_turns_keeps_a_lone_quiet_turn_and_says_who_reached_a_stretch() -> None:
    zero = {k: RatioPublic(num=0, den=0) for k, _ in TURN_COLUMNS}
    busy = {**zero, "selection_recall": RatioPublic(num=1, den=2)}

    def turn(n: int, families: dict[str, RatioPublic], conversations: int = 3, failed: int = 0) -> TurnFigures:
        return TurnFigures(turn=n, trajectories=conversations, failed=failed, families=families, failures={})

    rows = fold_turns(
        [
            turn(1, busy),
            turn(2, zero),
            turn(3, busy),
            turn(4, zero),
            turn(5, zero, 2),
            turn(6, zero, 1),
            turn(7, zero, 1, failed=1),
        ]
    )
    assert [(r.first, r.last, r.turn is None, r.conversations) for r in rows] == [
        (1, 1, False, ""),
        (2, 2, False, ""),
        (3, 3, False, ""),
        (4, 6, True, "3 → 1"),
        (7, 7, False, ""),
    ]


def test_the_pass_rate_reads_the_same_on_the_runs_list_and_the_run_page(client: TestClient) -> None:
    """conv: RECOVERED, CARELESS and its copy scored (CARELESS fails), USER_STOPPED left out: 1 of 3."""
    run = client.get("/api/runs/1").json()
    assert (run["trajectories"], run["scored"], run["passed"]) == (4, 3, 1)
    page = client.get("/runs/1", headers=HTML).text
    assert "passed</span> <b>33.3%</b>" in page
    assert '<a href="?passed=true#trajectories">1</a> of 3 trajectories' in page
    assert "1 broken by the simulated user, left out" in page
    runs = client.get("/", headers=HTML).text
    row = runs[runs.index('aria-label="compare conv"') :]
    assert "<b>33.3%</b> <small>1/3</small>" in row[: row.index("</tr>")]
