"""`toollens fix` on the dashboard, in a real browser: each confused pair of the
run page shows its suggested rewrite and the command that verifies it; the
compare page puts each changed description beside the cells it moved."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.runner.session import RunRequest, run_agent
from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.resources import chromium, require_browser
from tests.servers import serve_in_thread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

require_browser()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('fix') / 'ui.db'}"
    upgrade(url)
    settings = Settings(database_url=url, auto_migrate=False)
    run_agent(
        settings,
        RunRequest(agent="simulated", suite_path=EXAMPLES / "suite_v1.yaml", sweep=True, run_name="v1 run", seed=5),
    )
    done = CliRunner().invoke(cli, ["fix", "v1 run", "--verify", "--db", url])
    assert done.exit_code in (0, 1), done.output
    with serve_in_thread(create_app(settings)) as base:
        yield base


@pytest.fixture()
def page(server: str) -> Iterator[Any]:
    with chromium() as b:
        yield b.new_page(viewport={"width": 1280, "height": 900})


def test_each_confused_pair_shows_its_rewrite_and_the_command(page: Any, server: str) -> None:
    page.goto(f"{server}/runs/1#lint", wait_until="networkidle")
    row = page.locator("#lint-pairs tr", has=page.locator("th", has_text="buscar_cliente ↔ buscar_pedido"))
    rewrite = row.locator("details.rewrite")
    assert not rewrite.locator("p.worddiff").first.is_visible()  # folded until asked
    rewrite.locator("summary").click()
    edits = rewrite.locator("p.worddiff")
    assert edits.count() >= 2
    added = " ".join(edits.locator("ins").all_inner_texts())
    assert "NO sirve para buscar cliente" in added and "usa buscar_cliente." in added
    command = rewrite.locator("code.command").inner_text()
    assert command == "toollens fix 'v1 run' --pair buscar_cliente,buscar_pedido --out candidate.yaml --verify"
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#lint").screenshot(path=str(ARTIFACTS / "fix-run.png"))


def test_the_compare_page_ties_each_changed_description_to_the_cells_it_moved(page: Any, server: str) -> None:
    page.goto(f"{server}/compare?a=1&b=2#description-diff", wait_until="networkidle")
    page.locator("#description-diff > summary").click()
    article = page.locator("article.desc-diff", has=page.locator("h3", has_text="buscar_pedido"))
    assert "NO sirve para buscar cliente" in article.locator("p.worddiff").inner_text()
    moved = article.locator("p.moved")
    text = moved.inner_text()
    assert text.startswith("cells it moved:") or text.startswith("no confusion cell of buscar_pedido moved")
    assert "(extra)" not in text and "(missing)" not in text
    for badge in moved.locator("span.badge").all():  # better in green, worse in red
        a, b = (int(x) for x in badge.inner_text().rsplit(": ", 1)[1].split(" → "))
        assert ("ok" in (badge.get_attribute("class") or "")) == (b < a)
    page.locator("#description-diff").screenshot(path=str(ARTIFACTS / "fix-compare.png"))
