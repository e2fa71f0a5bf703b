"""A long toolset label (what `toollens fix` writes: v1+fix1,2,…,35) stays on one line in a real
browser, cut with an ellipsis, the whole label in its title: on the runs list, the run page and compare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.resources import chromium, require_browser
from tests.servers import serve_in_thread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LABEL = "v1+fix" + ",".join(str(n) for n in range(1, 36))  # 99 characters

require_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('label') / 'ui.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, auto_migrate=False))
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()][:6]
    with TestClient(app) as client:
        for name, label in (("plain", "v1"), ("fixed", LABEL)):
            doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
            doc["toolset"]["label"] = label
            doc["toolset"]["tools"][0]["description"] += f" ({name})"  # a new version: a label names one
            rid = client.post("/api/runs", json={"name": name, "suite": doc}).json()["id"]
            assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
    with serve_in_thread(app) as served:
        yield served


def one_line(page: Any, selector: str) -> dict[str, Any]:
    """The label's box, its line height, and its title."""
    return page.locator(selector).first.evaluate(
        "e => ({height: e.getBoundingClientRect().height, line: parseFloat(getComputedStyle(e).lineHeight) || "
        "1.2 * parseFloat(getComputedStyle(e).fontSize), title: e.title, cut: e.scrollWidth > e.clientWidth})"
    )


def test_a_long_toolset_label_stays_on_one_line(server: str) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        where = (
            ("/", "#runs-table tr:has(input[aria-label='compare fixed']) code.tlabel"),
            ("/runs/2", "p.meta code.tlabel"),
            ("/compare?a=1&b=2", "p.meta code.tlabel >> nth=1"),
        )
        for path, selector in where:
            page.goto(server + path)
            box = one_line(page, selector)
            assert box["height"] < 1.5 * box["line"], (path, box)
            assert box["cut"] and box["title"].startswith(LABEL), (path, box)
