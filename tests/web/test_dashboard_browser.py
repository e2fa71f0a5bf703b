"""The dashboard as a newcomer meets it, in a real browser (Playwright driving
Debian's Chromium), served by uvicorn under the root path ``/tl`` behind a
"proxy" (the browser's request routing strips the prefix, as nginx would).

Screenshots land in ``tests/artifacts/`` (ignored by git).
"""

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

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PREFIX = "/tl"

require_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'ui.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, auto_migrate=False))
    with TestClient(app) as client:
        for version in ("v1", "v2"):
            doc = load_suite_document(EXAMPLES / f"suite_{version}.yaml")
            rid = client.post("/api/runs", json={"name": f"banca-{version}", "suite": doc}).json()["id"]
            recs = [json.loads(x) for x in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]
            assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
    with serve_in_thread(app, root_path=PREFIX) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture()
def page(browser: Any, server: str) -> Iterator[Any]:
    """A fresh profile at 1400x900; requests under /tl reach the app with the prefix stripped."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.requested: list[str] = []  # type: ignore[attr-defined, misc]
    p.failed: list[str] = []  # type: ignore[attr-defined, misc]

    def proxy(route: Any) -> None:
        p.requested.append(route.request.url)  # type: ignore[attr-defined]
        url = route.request.url
        if url.startswith(server + PREFIX + "/") or url == server + PREFIX:
            route.continue_(url=server + url[len(server + PREFIX) :])
        else:  # the app linked outside its prefix
            p.failed.append(url)  # type: ignore[attr-defined]
            route.abort()

    p.route("**/*", proxy)
    p.on("response", lambda r: r.status >= 400 and p.failed.append(f"{r.status} {r.url}"))  # type: ignore[attr-defined]
    yield p
    context.close()


def shot(page: Any, name: str, full: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dash-{name}.png"), full_page=full)


def test_the_runs_list_loads_no_plotly_and_everything_under_the_prefix(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/")
    page.wait_for_load_state("load")
    assert page.locator("#runs-table tbody tr").count() == 2
    assert not any("plotly" in u for u in page.requested)  # type: ignore[attr-defined]
    assert page.evaluate("() => typeof window.Plotly") == "undefined"
    css = page.evaluate("() => getComputedStyle(document.querySelector('header.top')).borderBottomStyle")
    assert css == "solid"  # the stylesheet came through the prefix
    page.get_by_role("link", name="banca-v1", exact=True).click()
    page.wait_for_selector("#outcomes-kind[data-rendered='1']")  # Plotly came after load, through the prefix too
    assert page.url.startswith(server + PREFIX + "/runs/")
    assert page.failed == []  # type: ignore[attr-defined]


def test_first_viewport_of_a_run_page_holds_the_ranked_causes(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/runs/1")
    causes = page.locator("#causes ol.causes li")
    assert causes.count() >= 3
    counts = [int(c.locator("b").first.inner_text()) for c in causes.all()]
    assert counts == sorted(counts, reverse=True)
    # the last cause's bottom edge is inside the 1400x900 viewport, without scrolling
    assert page.evaluate("() => window.scrollY") == 0
    box = causes.last.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900
    assert page.locator("#pass .passrate").is_visible()
    shot(page, "run-first-viewport", full=False)
    shot(page, "run")
    # the first cause lists exactly its trajectories
    first = causes.first
    n = counts[0]
    first.locator("a").click()
    page.wait_for_url("**#trajectories")
    assert f"{n} shown by the filter" in page.locator("#traj-h").inner_text()


def test_section_nav_stays_on_screen(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/runs/1")
    page.locator("nav.sections a", has_text="Trajectories").click()
    page.wait_for_function("() => window.scrollY > 500")
    top = page.locator("nav.sections").bounding_box()
    assert top is not None and top["y"] == 0  # sticky at the top while scrolled
    box = page.locator("#traj-h").bounding_box()
    assert box is not None and 0 <= box["y"] < 300


def test_lint_findings_one_line_per_pair_details_on_demand(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/runs/1#lint")
    row = page.locator("#lint-pairs tbody tr").first
    box = row.bounding_box()
    assert box is not None and box["height"] < 60  # one line: the findings are folded
    details = row.locator("details:not(.rewrite)")
    assert "finding" in details.locator("summary").inner_text()
    assert not details.locator("ul.findings").is_visible()
    details.locator("summary").click()
    assert details.locator("ul.findings").is_visible()


def test_header_and_breadcrumbs_move_around(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/trajectories/1")
    crumbs = page.locator("p.crumbs")
    assert crumbs.inner_text().startswith("Runs › banca-v1 ›")
    crumbs.get_by_role("link", name="banca-v1").click()
    page.wait_for_url("**/tl/runs/1")
    page.locator("header nav").get_by_role("link", name="Toolsets").click()
    page.wait_for_url("**/tl/toolsets")
    shot(page, "toolsets")
    page.locator("#toolsets-table").get_by_role("link", name="atencion_cliente").click()
    page.wait_for_url("**/tl/toolsets/atencion_cliente")
    assert page.locator("p.crumbs").inner_text() == "Runs › Toolsets › atencion_cliente"
    page.locator("header nav").get_by_role("link", name="Compare").click()
    page.select_option("#compare-pick select[name=a]", "1")
    page.select_option("#compare-pick select[name=b]", "2")
    page.locator("#compare-pick button").click()
    page.wait_for_url("**/tl/compare?a=1&b=2")
    assert page.locator("#deltas tbody tr").count() > 0
    assert page.failed == []  # type: ignore[attr-defined]


def test_compare_page_reads_top_down(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/compare?a=1&b=2")
    assert "blocking" in page.locator("#deltas tbody tr", has_text="hallucination after error").inner_text()
    diffs = page.locator("#description-diff article.desc-diff")
    assert diffs.count() == 7 and not diffs.first.is_visible()  # folded under their count
    flipped = page.locator("#flipped tbody tr").first
    assert flipped.locator("a").count() == 3
    shot(page, "compare")
    page.locator("#description-diff summary").click()
    assert diffs.first.is_visible()
    flipped.get_by_role("link", name="call-level diff").click()
    page.wait_for_url("**/tl/compare/trajectories?**")
    assert page.locator("#pair tbody tr td").first.inner_text() == "1"  # calls counted from 1
    page.locator("p.crumbs").get_by_role("link", name="Compare").click()  # and back
    page.wait_for_url("**/tl/compare?a=1&b=2")


def test_trajectory_page_steps_through_failing_trajectories(server: str, page: Any) -> None:
    page.goto(server + PREFIX + "/runs/1?passed=false#trajectories")
    page.locator("#trajectory-list tbody tr a").first.click()
    first = page.url
    assert page.locator("a[rel=prev]").count() == 0
    page.locator("a[rel=next]").click()
    page.wait_for_url(lambda url: url != first)
    assert "failed" in page.locator("h1").inner_text()
    page.locator("a[rel=prev]").click()
    page.wait_for_url(first)
    # pedido-001 trial 1: one wrong call, its expected step shown once beside it
    page.goto(server + PREFIX + "/runs/1?expected=buscar_pedido&called=buscar_producto#trajectories")
    page.locator("#trajectory-list tbody tr", has_text="pedido-001").first.locator("a").click()
    assert "trial 1" in page.locator("h1").inner_text()
    steps = page.locator("#timeline li.step")
    assert steps.count() == 1
    assert "expected step #1 never done" in steps.first.inner_text()
    shot(page, "trajectory")
    assert page.failed == []  # type: ignore[attr-defined]
