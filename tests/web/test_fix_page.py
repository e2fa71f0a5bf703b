"""`toollens fix` on the run page, without a browser: the first screen names
the command, and each pair's rewrite is the text `toollens fix --pair` prints."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.settings import Settings
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_first_screen_names_fix_and_each_pair_shows_the_clis_text(db_url: str) -> None:
    done = CliRunner().invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "v1",
            "--db",
            db_url,
        ],
    )
    assert done.exit_code == 0, done.output
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        html = c.get("/runs/1", headers={"accept": "text/html"}).text
    first_screen = html[: html.index('<nav class="sections"')]
    assert (
        '<code class="command">toollens fix v1</code> ranks the description edits these 23 failed '
        "trajectories call for" in first_screen
    )
    row = re.search(r"<code>buscar_pedido</code> ↔ <code>buscar_producto</code></th>(.*?)</tr>", html, re.S)
    assert row is not None
    shown = {
        (tool, unescape(re.sub(r"<[^>]+>", "", text)))
        for tool, text in re.findall(
            r'<p class="worddiff"><small class="muted">[a-z ]+</small> <code>(\w+)</code>: (.*?)</p>', row.group(1)
        )
    }
    done = CliRunner().invoke(cli, ["fix", "v1", "--json", "--pair", "buscar_pedido,buscar_producto", "--db", db_url])
    assert done.exit_code == 0, done.output
    pair = {
        (p["tool"], p["after"])
        for p in json.loads(done.stdout)["proposals"]
        if p["pattern"] in ("negative_delimitation", "distinct_names")
        and any({c["expected"], c["called"]} == {"buscar_pedido", "buscar_producto"} for c in p["addresses"]["cells"])
    }
    assert shown == pair and len(pair) == 3
    assert (
        "buscar_producto",
        'Busca información por texto. NO sirve para buscar pedido por número (formato "PED-12345"): usa buscar_pedido.',
    ) in pair
