"""The dashboard in a real browser (Playwright driving Debian's Chromium),
against the app served by uvicorn on loopback with the example runs loaded.

Screenshots of each page land in ``tests/artifacts/`` (ignored by git).
"""

from __future__ import annotations

import json
import shutil
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

require_browser()

PAYLOADS = [
    "<script>window.__xss = 1</script>",
    "</script><script>window.__xss = 2</script>",
    '"><img src=x onerror="window.__xss = 3">',
    "javascript:window.__xss = 4",
]
EVIL_TOOL = "<img src=x onerror=window.__xss=5>"


def evil_suite() -> dict[str, Any]:
    text = " ".join(PAYLOADS)
    return {
        "name": "xss",
        "toolset": {
            "name": "xss-tools",
            "label": "evil",
            "tools": [
                {
                    "name": "buscar",
                    "description": f"Busca. {text}",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                    "mock": text,
                },
            ],
        },
        "cases": [
            {
                "id": f"xss-{text}",
                "question": text,
                "expected_calls": [{"name": "buscar", "arguments": {"q": text}}],
                "expected_datum": text,
            }
        ],
    }


def evil_records() -> list[dict[str, Any]]:
    text = " ".join(PAYLOADS)
    case_id = f"xss-{text}"
    return [
        {
            "case_id": case_id,
            "trial": 0,
            "question": text,
            "calls": [
                {
                    "name": "buscar",
                    "arguments": {"q": text, PAYLOADS[2]: PAYLOADS[0]},
                    "observation": text,
                    "error": {"kind": "http_503", "message": text, "injected": True},
                },
                {"name": EVIL_TOOL, "arguments": text, "observation": text, "error": None},
            ],
            "answer": text,
            "fault": {"step": 0, "kind": "http_503"},
        }
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('browser') / 'ui.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, auto_migrate=False))
    with TestClient(app) as client:
        for version in ("v1", "v2"):
            doc = load_suite_document(EXAMPLES / f"suite_{version}.yaml")
            rid = client.post("/api/runs", json={"name": f"banca-{version}", "suite": doc, "model": "sim"}).json()["id"]
            recs = [json.loads(x) for x in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]
            assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
        rid = client.post("/api/runs", json={"name": "xss", "suite": evil_suite()}).json()["id"]
        r = client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": evil_records()})
        assert r.status_code == 200, r.text
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    p = context.new_page()
    p.dialogs: list[str] = []  # type: ignore[attr-defined, misc]
    p.on("dialog", lambda d: (p.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    refused: list[str] = []  # what the Content-Security-Policy blocked: the pages must need nothing it forbids
    p.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    yield p
    context.close()
    assert not refused, refused


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_runs_page_lists_runs_and_blocking_failures(server: str, page: Any) -> None:
    page.goto(server + "/")
    rows = page.locator("#runs-table tbody tr")
    assert rows.count() == 3
    v1 = page.locator("#runs-table tbody tr", has_text="banca-v1")
    assert "BLOCKING: hallucinated tools" in v1.inner_text()
    assert "85.5%" in v1.inner_text() and "65/76" in v1.inner_text()
    # tick two runs: the compare button opens the comparison
    button = page.locator("#compare-button")
    assert button.is_disabled()
    page.locator("#runs-table tbody tr", has_text="banca-v1").locator("input.pick").check()
    page.locator("#runs-table tbody tr", has_text="banca-v2").locator("input.pick").check()
    assert button.is_enabled()
    shot(page, "runs")
    button.click()
    page.wait_for_url("**/compare?**")
    assert page.locator("#flipped tbody tr").count() > 0


def test_clicking_a_confusion_cell_lists_its_trajectories(server: str, page: Any) -> None:
    page.goto(server + "/")
    page.get_by_role("link", name="banca-v1", exact=True).click()
    shot(page, "run")
    # the cell expected=buscar_pedido, called=buscar_producto: an error tone, its count printed
    table = page.locator("#confusion-table")
    col = table.locator("thead th").all_inner_texts().index("buscar_producto")
    cell = table.locator("tbody tr", has=page.locator("th", has_text="buscar_pedido")).first.locator("td").nth(col - 1)
    assert cell.inner_text() == "4" and "err-" in (cell.get_attribute("class") or "")
    cell.locator("a").click()
    page.wait_for_url("**expected=buscar_pedido**")
    assert "called=buscar_producto" in page.url
    rows = page.locator("#trajectory-list tbody tr")
    assert rows.count() == 4
    shot(page, "run-cell")


def open_a_hallucinated_trajectory(server: str, page: Any) -> None:
    """From the runs page to banca-v1, filtered by outcome, to its trajectory whose invented answer
    followed an injected 503 (the other two followed a schema refusal and an unknown tool)."""
    page.goto(server + "/")
    page.get_by_role("link", name="banca-v1", exact=True).click()
    page.select_option("select[name=outcome]", "hallucinated")
    page.get_by_role("button", name="Filter").nth(0).click()
    page.locator("#trajectory-list tbody tr", has_text="http_503").locator("a").first.click()


def test_trajectory_timeline_highlights_the_injected_error(server: str, page: Any) -> None:
    open_a_hallucinated_trajectory(server, page)
    injected = page.locator(".timeline .injected-row")
    assert injected.count() == 1
    assert injected.is_visible()
    assert "injected http_503" in injected.inner_text()
    border = injected.evaluate("el => getComputedStyle(el).borderLeftWidth")
    assert border == "8px"
    assert page.locator(".badge.o-hallucinated").count() >= 1
    shot(page, "trajectory")


def test_a_person_labels_an_outcome_and_the_run_page_shows_the_agreement(server: str, page: Any) -> None:
    open_a_hallucinated_trajectory(server, page)
    page.select_option("#labels select[name=label]", "confused")
    page.fill("#labels input[name=author]", "Ana <b>QA</b>")
    page.get_by_role("button", name="Save label").click()
    page.wait_for_url("**#labels")
    row = page.locator("#labels tbody tr", has_text="human")
    assert "confused" in row.inner_text() and "disagrees" in row.inner_text()
    assert "Ana <b>QA</b>" in row.inner_text()  # shown as text, not markup
    page.locator(".crumbs").get_by_role("link", name="banca-v1", exact=True).click()
    agreement = page.locator("#agreement tbody tr", has_text="human vs deterministic")
    assert agreement.locator("td").nth(0).inner_text() == "1"  # both labelled
    assert agreement.locator("td").nth(1).inner_text() == "0"  # agree
    shot(page, "labels")


def test_a_person_adds_a_trajectory_to_a_new_suite_from_its_page(server: str, page: Any) -> None:
    page.goto(server + "/trajectories/36")  # banca-v1, nota-001: the credit note retried after a 503
    curate = page.locator("#curate")
    assert "(2 attempts)" in curate.locator("tr", has_text="emitir_nota_credito").inner_text()
    page.select_option("#curate select[name=suite]", "new")
    page.fill("#curate input[name=new_suite]", "regresiones")
    page.fill("#curate input[name=case_id]", "nota-duplicada")
    page.uncheck("#curate input[name='keep.1']")  # verificar_compra
    page.select_option("#curate select[name='rule.3.monto']", "number")
    page.fill("#curate input[name='abs.3.monto']", "-5")
    curate.get_by_role("button", name="Add the case").click()
    assert "calls[3].tolerance.monto" in page.locator("#curate-error").inner_text()
    assert curate.locator(".arg.invalid").count() == 1 and "monto" in curate.locator(".arg.invalid").inner_text()
    assert page.locator("#curate input[name=case_id]").input_value() == "nota-duplicada"  # as sent
    assert not page.locator("#curate input[name='keep.1']").is_checked()
    shot(page, "curate-error")
    page.fill("#curate input[name='abs.3.monto']", "100")
    page.select_option("#curate select[name='rule.3.motivo']", "ignore")
    curate.get_by_role("button", name="Add the case").click()
    page.wait_for_url("**#curate")
    added = page.locator("#curate p.ok").inner_text()
    assert "Added case nota-duplicada: suite regresiones version 1" in added and "1 case)" in added
    curate.screenshot(path=str(ARTIFACTS / "curate.png"))
    doc = page.request.get(server + page.locator("#curate p.ok a").get_attribute("href")).json()["document"]
    assert doc["cases"][0]["expected_calls"] == [
        {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
        {
            "name": "emitir_nota_credito",
            "arguments": {"id": 8812, "monto": 45990, "motivo": "cobro duplicado"},
            "tolerance": {"monto": {"number": {"abs": 100.0}}, "motivo": "ignore"},
        },
    ]


def test_compare_page_shows_flips_and_description_diff(server: str, page: Any) -> None:
    page.goto(server + "/compare?a=1&b=2")
    assert page.locator("#flipped tbody tr").count() > 0
    assert page.locator("#description-diff ins").count() > 0
    assert page.locator("#description-diff del").count() > 0
    assert "McNemar" in page.locator(".mcnemar").inner_text()
    page.wait_for_selector("#confusion-diff[data-rendered='1']")
    shot(page, "compare")
    page.locator("#flipped a", has_text="call-level diff").first.click()
    assert page.locator("#pair tbody tr").count() > 0
    shot(page, "compare-pair")


def test_toolset_page_diffs_versions(server: str, page: Any) -> None:
    page.goto(server + "/toolsets/atencion_cliente")
    assert page.locator("#description-diff .desc-diff").count() == 7
    shot(page, "toolset")


def test_untrusted_text_executes_nothing(server: str, page: Any) -> None:
    page.goto(server + "/")
    page.get_by_role("link", name="xss", exact=True).click()
    page.wait_for_selector("#confusion-table")
    urls = [page.url]
    page.locator("#trajectory-list tbody tr a").first.click()
    urls.append(page.url)
    page.goto(server + "/toolsets/xss-tools")
    urls.append(page.url)
    for url in urls:
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("() => window.__xss") is None, url
        assert page.locator("a[href^='javascript:']").count() == 0, url
        assert page.locator("img[src='x']").count() == 0, url
    assert page.dialogs == []  # type: ignore[attr-defined]
    page.goto(urls[1])
    text = page.locator("body").inner_text()
    assert "<script>window.__xss = 1</script>" in text  # shown, as text
    shot(page, "xss-trajectory")


def test_unknown_run_is_a_proper_404_page(server: str, page: Any) -> None:
    response = page.goto(server + "/runs/424242")
    assert response.status == 404
    assert "no run 424242" in page.locator("main").inner_text()


@pytest.fixture(scope="module", autouse=True)
def _clean_artifacts() -> None:
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
