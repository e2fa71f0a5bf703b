"""Cost and latency in a real browser (Playwright driving Debian's Chromium):
the timeline's latency bars are drawn to scale under the page's content
policy, the run page's cost card and the runs list's columns read as the
figures say. Screenshots land in ``tests/artifacts/`` (ignored by git)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.resources import chromium, require_browser
from tests.servers import serve_in_thread
from tests.store.test_usage_store import FAILING, PASSING, store

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

require_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('usage') / 'ui.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, auto_migrate=False))
    with TestClient(app) as client:
        store(client, "usage", PASSING, FAILING)
    with serve_in_thread(app) as base:
        yield base


@pytest.fixture()
def page(server: str) -> Iterator[Any]:
    with chromium() as b:
        p = b.new_page(viewport={"width": 1280, "height": 900})
        p.refused = []  # type: ignore[attr-defined]
        p.on(
            "console",
            lambda m: (
                p.refused.append(m.text)  # type: ignore[attr-defined]
                if "Content Security Policy" in m.text
                else None
            ),
        )
        yield p


def test_latency_bars_are_drawn_to_scale(page: Any, server: str) -> None:
    page.goto(f"{server}/trajectories/2", wait_until="networkidle")
    bars = page.locator("#timeline .lat-bar rect")
    assert bars.count() == 2
    widths = [bars.nth(i).bounding_box()["width"] for i in range(2)]
    frame = page.locator("#timeline .lat-bar").first.bounding_box()["width"]
    assert widths[1] == pytest.approx(frame, abs=0.5)  # the slowest call (251 ms) fills its bar
    assert widths[0] == pytest.approx(frame * 80 / 251, abs=0.5)
    assert "251 ms (delay 250 ms)" in " ".join(page.locator("#timeline").inner_text().split())
    page.locator("#usage summary").click()
    assert page.locator("#model-calls").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "usage-timeline.png"), full_page=True)
    assert page.refused == []  # type: ignore[attr-defined]


def test_the_run_page_and_the_runs_list_show_cost(page: Any, server: str) -> None:
    page.goto(f"{server}/runs/1", wait_until="networkidle")
    card = page.locator("#usage-cost")
    assert card.is_visible() and "$0.0112" in card.inner_text() and "my-llama" in card.inner_text()
    page.locator("#usage").screenshot(path=str(ARTIFACTS / "usage-run.png"))
    page.goto(f"{server}/", wait_until="networkidle")
    row = page.locator("#runs-table tbody tr").first.inner_text()
    assert "7,120" in row and "$0.0112" in row
    assert page.refused == []  # type: ignore[attr-defined]
