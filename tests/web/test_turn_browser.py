"""A conversation in a real browser (Playwright driving Debian's Chromium):
the timeline groups the calls under each user turn, the user's words shown
above them as text, and the run page has its per-turn table. Screenshots land
in ``tests/artifacts/`` (ignored by git)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.core.test_turns import CARELESS, RECOVERED, USER_STOPPED
from tests.resources import chromium, require_browser
from tests.servers import serve_in_thread
from tests.store.test_turns_store import SUITE

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
EVIL = "<b id=injected>bold</b> Sí, confirmo"

require_browser()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('turns') / 'ui.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, auto_migrate=False))
    careless = {
        **CARELESS,
        "messages": [m if m["content"] != "Sí, confirmo" else {**m, "content": EVIL} for m in CARELESS["messages"]],
    }
    with TestClient(app) as client:
        rid = client.post("/api/runs", json={"name": "conversaciones", "suite": SUITE}).json()["id"]
        r = client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [RECOVERED, careless, USER_STOPPED]})
        assert r.status_code == 200
    with serve_in_thread(app) as url_base:
        yield url_base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def test_the_timeline_reads_turn_by_turn(browser: Any, base: str) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{base}/trajectories/2")
        turns = page.locator("section.turn")
        assert turns.count() == 2
        # what the user said sits above the calls that answer it, as text (the markup is not rendered)
        second = turns.nth(1)
        assert second.locator("blockquote.user-says").inner_text() == f"USER {EVIL}"
        assert page.locator("#injected").count() == 0
        box_user = second.locator("blockquote.user-says").bounding_box()
        box_call = second.locator("li.step").first.bounding_box()
        assert box_user["y"] + box_user["height"] <= box_call["y"]
        names = [turns.nth(i).locator("li.step .executed > code").all_inner_texts() for i in range(2)]
        assert names == [["buscar_cliente", "verificar_compra", "emitir_nota_credito"], ["cancelar_pedido"]]
        assert "forbidden call" in turns.nth(0).inner_text()
        # what the agent said closes its turn: the confirmation it asked for (after emitting already)
        assert turns.nth(0).locator("blockquote.agent-says").all_inner_texts() == [
            "AGENT ¿Confirma la nota de crédito por $15.000?"
        ]
        assert turns.nth(1).locator("blockquote.agent-says").all_inner_texts() == ["AGENT Listo, NC-40021."]
        box_agent = turns.nth(0).locator("blockquote.agent-says").bounding_box()
        assert box_agent["y"] >= turns.nth(0).locator("li.step").last.bounding_box()["y"]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "turns-timeline.png"), full_page=True)
        page.goto(f"{base}/runs/1#turns")
        table = page.locator("#turns table")
        assert table.locator("tbody tr").count() == 2
        assert table.locator("tbody tr").nth(1).locator("th").inner_text() == "2"
        page.locator("#turns").screenshot(path=str(ARTIFACTS / "turns-run.png"))
    finally:
        page.close()
