"""What went wrong on a real run (tau-bench gpt-4o airline, 100 trajectories,
69 failed, ``match: subset``): causes over failed trajectories only, each
counted once, in the figures JSON over real HTTP on both databases, each
cause's filter listing exactly its trajectories; and the trajectory page's
first screen in a real browser (the sentence, its links, folded observations)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.resources import DATA, chromium, require_data, shared_data
from tests.servers import serve_in_thread

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
runner = CliRunner()


def _import(db_url: str) -> None:
    r = runner.invoke(
        cli,
        [
            "import",
            str(TAU),
            "--format",
            "tau-bench",
            "--tools",
            str(SCHEMAS),
            "--run",
            "tau",
            "--batch",
            "30",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code == 0, r.output


def _all(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    got = client.get("/api/runs/1/trajectories", params={**params, "limit": 500}).json()
    assert got["count"] == len(got["data"])
    return list(got["data"])


@shared_data(TAU, SCHEMAS)
def test_causes_count_each_failed_trajectory_once_and_filter_exactly_those(db_url: str) -> None:
    _import(db_url)
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        causes = client.get("/api/runs/1/figures", params={"cases_limit": 1}).json()["causes"]
        failed = {t["id"] for t in _all(client, passed="false")}
        assert len(failed) == 69 and sum(c["count"] for c in causes) == 69
        # largest first: what the run page shows on top, read trajectory by trajectory
        assert [(c["count"], c["text"]) for c in causes[:4]] == [
            (15, "update_reservation_flights never called with the expected values"),
            (13, "expected call to cancel_reservation never made"),
            (9, "book_reservation never called with the expected values"),
            (8, "expected call to update_reservation_flights never made"),
        ]
        # extra calls are allowed under subset: none is a cause (84 trajectories made such calls, 40 passed)
        assert not [c for c in causes if c["kind"] == "extra_call"]
        seen: set[int] = set()
        for c in causes:
            listed = _all(client, **c["filter"])
            ids = {t["id"] for t in listed}
            assert len(ids) == c["count"], c
            assert ids <= failed and not ids & seen  # failed ones only, each under one cause
            seen |= ids
            one = client.get(f"/api/trajectories/{listed[0]['id']}").json()
            assert one["detail"]["divergence"]["key"] == c["filter"]["cause"]
        assert seen == failed
        # and on the page: the first cause's link lists exactly its trajectories
        page = client.get("/runs/1", headers={"accept": "text/html"}).text
        assert "15</b> failed trajectories: update_reservation_flights never called with the expected values" in page
        listed_page = client.get(
            "/runs/1?cause=arguments%3Aupdate_reservation_flights%3A", headers={"accept": "text/html"}
        ).text
        assert "15 shown by the filter" in listed_page


@pytest.fixture(scope="module")
def tau_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_data(TAU, SCHEMAS)
    url = f"sqlite:///{tmp_path_factory.mktemp('tau') / 'tau.db'}"
    upgrade(url)
    _import(url)
    with serve_in_thread(create_app(Settings(database_url=url, auto_migrate=False))) as base:
        yield base


def _trajectory_id(base: str, case_id: str, trial: int) -> int:
    import httpx

    data = httpx.get(f"{base}/api/runs/1/trajectories", params={"case_id": case_id, "limit": 10}).json()["data"]
    return int(next(t["id"] for t in data if t["trial"] == trial))


def test_the_trajectory_page_says_why_on_its_first_screen(tau_server: str) -> None:
    tid = _trajectory_id(tau_server, "task-9", 2)  # 23 calls; the booking fails at call #15, then 4 retries
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{tau_server}/trajectories/{tid}")
        why = page.locator("#why")
        assert why.locator("p").all_inner_texts() == [
            "First divergence: expected step #2 book_reservation was never called with the expected values: "
            "at call #15 flights differs from the expected value.",
            "After the error at call #15 (book_reservation) the agent tried it again 4 times (last at call #23), "
            "every one failing, and ended without telling the user: outcome confused.",
        ]
        box = why.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900  # on the first screen
        # each call is linked to its row
        why.get_by_role("link", name="call #23").click()
        page.wait_for_url("**#call-23")
        row = page.locator("#call-23").bounding_box()
        assert row is not None and -1 <= row["y"] < 900  # scrolled to it (to a fraction of a pixel)
        # a long observation shows three lines, the rest opens on demand (no JavaScript: <details>)
        obs = page.locator("#call-4 .obs")
        assert obs.locator("details").count() == 1 and not obs.locator("details").get_attribute("open")
        assert obs.locator("pre.head").inner_text().endswith("…")
        full = obs.locator("details pre")
        assert not full.is_visible()
        obs.locator("summary").click()
        assert full.is_visible() and len(full.inner_text()) == 4057
        # 14,239 px before folding; every call still on the page
        page.goto(f"{tau_server}/trajectories/{tid}")
        height = page.evaluate("() => document.documentElement.scrollHeight")
        assert height < 10_000, height
        assert page.locator("li.step[id^=call-]").count() == 23
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "why-first-screen.png"))


def test_a_passed_trajectory_has_no_divergence_sentence(tau_server: str) -> None:
    import httpx

    passed = httpx.get(f"{tau_server}/api/runs/1/trajectories", params={"passed": "true", "limit": 1}).json()
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{tau_server}/trajectories/{passed['data'][0]['id']}")
        assert "First divergence" not in page.content()
