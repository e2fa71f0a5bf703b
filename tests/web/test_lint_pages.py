"""Lint where the figures are: the run page puts each finding beside the
confusion cells of its pair (both directions), the toolset page diffs any two
versions per tool (description, schema, findings, per-tool figures); both
with JSON twins. Real HTTP against the app, HTML read with a parser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HTML = {"accept": "text/html"}


class Rows(HTMLParser):
    """The text of each row of one table (by id), cell by cell."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.depth, self.rows = table_id, 0, []  # type: ignore[var-annotated]
        self.cell: list[str] | None = None
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and dict(attrs).get("id") == self.table_id:
            self.depth = 1
        elif self.depth and tag == "tr":
            self.rows.append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = []
        elif self.depth and tag == "a":
            self.links.append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif self.depth and tag == "table":
            self.depth = 0

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def table(html: str, table_id: str) -> Rows:
    p = Rows(table_id)
    p.feed(html)
    return p


def _run(c: TestClient, suite: str, trajectories: str, name: str) -> int:
    rid = int(c.post("/api/runs", json={"name": name, "suite": load_suite_document(EXAMPLES / suite)}).json()["id"])
    recs = [json.loads(x) for x in (EXAMPLES / trajectories).read_text().splitlines()]
    assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
    return rid


@pytest.fixture()
def client(db_url: str) -> Iterator[tuple[TestClient, int, int]]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield (
            c,
            _run(c, "suite_v1.yaml", "trajectories_v1.jsonl", "v1"),
            _run(c, "suite_v2.yaml", "trajectories_v2.jsonl", "v2"),
        )


def test_run_page_puts_findings_beside_the_confused_cells(client: tuple[TestClient, int, int]) -> None:
    c, v1, _ = client
    data = c.get(f"/api/runs/{v1}/lint").json()
    assert data["counts"] == {
        "similar_pair": 4,
        "no_negative_delimitation": 4,
        "argument_format": 9,
        "missing_precondition": 4,
        "unguarded_destructive": 0,
        "lookalike_pair": 4,
    }
    top = data["pairs"][0]
    # the seed's hot cell: buscar_producto called where buscar_pedido was expected, 4 times, and they read alike
    assert (top["a"], top["b"], top["a_called_as_b"], top["b_called_as_a"]) == (
        "buscar_pedido",
        "buscar_producto",
        4,
        0,
    )
    assert [(f["rule"], f["tool"]) for f in top["findings"]] == [
        ("similar_pair", "buscar_pedido"),
        ("no_negative_delimitation", "buscar_pedido"),
        ("no_negative_delimitation", "buscar_producto"),
        ("lookalike_pair", "buscar_pedido"),
    ]
    pairs = {(p["a"], p["b"]): p for p in data["pairs"]}
    both = pairs[("emitir_nota_credito", "verificar_compra")]  # confused both ways, and a declared precondition
    assert (both["a_called_as_b"], both["b_called_as_a"]) == (1, 1)
    assert [f["rule"] for f in both["findings"]] == ["missing_precondition"]
    assert pairs[("buscar_pedido", "verificar_compra")]["findings"] == []  # confused once, reads unlike
    fields = {(x["tool"], x["field"]): x["schema_errors"] for x in data["fields"]}
    assert fields[("ver_saldo", "id")] == 1 and fields[("emitir_nota_credito", "monto")] == 1

    html = c.get(f"/runs/{v1}", headers=HTML).text
    rows = table(html, "lint-pairs")
    first = rows.rows[1]
    assert first[0] == "buscar_pedido ↔ buscar_producto"
    assert first[1].startswith("4 expected buscar_pedido, called buscar_producto")
    assert first[2].startswith("0 expected buscar_producto, called buscar_pedido")
    assert "buscar_pedido and buscar_producto read alike (descriptions, similarity 0.62)" in first[3]
    assert "?expected=buscar_pedido&called=buscar_producto#trajectories" in rows.links
    assert any(r[0] == "buscar_pedido ↔ verificar_compra" and "yet no lint finding" in r[3] for r in rows.rows[1:])
    assert table(html, "lint-fields").rows[1][:2] == ["buscar_cliente.rut", "1"]


def test_run_page_of_the_rewritten_toolset(client: tuple[TestClient, int, int]) -> None:
    c, _, v2 = client
    data = c.get(f"/api/runs/{v2}/lint").json()
    assert data["findings"] == [] and data["fields"] == []
    assert [(p["a"], p["b"], p["a_called_as_b"], p["b_called_as_a"]) for p in data["pairs"]] == [
        ("buscar_pedido", "buscar_producto", 1, 0)
    ]  # the one confusion v2 keeps, and nothing reads alike
    assert "0 findings" in c.get(f"/runs/{v2}", headers=HTML).text


def test_toolset_page_diffs_any_two_versions(client: tuple[TestClient, int, int]) -> None:
    c, _, _ = client
    versions = c.get("/api/toolsets/atencion_cliente").json()["versions"]
    h1, h2 = versions[0]["hash"], versions[1]["hash"]
    detail: dict[str, Any] = c.get("/api/toolsets/atencion_cliente/versions", params={"a": "v1", "b": "v2"}).json()
    assert (detail["a"], detail["b"]) == (h1, h2)
    # 21 + lookalike_pair buscar_cliente / verificar_compra ("X información del cliente") and the three
    # buscar_* pairs (names that differ in one object word, no example of any identifier)
    assert len(detail["lint_a"]["findings"]) == 25 and detail["lint_b"]["findings"] == []
    tools = {t["name"]: t for t in detail["tools"]}
    pedido = tools["buscar_pedido"]
    assert pedido["change"] == "changed" and pedido["schema_changes"] == []
    # v1 cells: expected buscar_pedido -> buscar_pedido 10, buscar_producto 4, cancelar_pedido 1, (missing) 1;
    # verificar_compra -> buscar_pedido 1. v2: 15 right, 1 buscar_producto.
    assert (pedido["precision_a"], pedido["recall_a"]) == ({"num": 10, "den": 11}, {"num": 10, "den": 16})
    assert (pedido["precision_b"], pedido["recall_b"]) == ({"num": 15, "den": 15}, {"num": 15, "den": 16})
    assert {"op": "delete", "text": "información"} in pedido["segments"]
    # about its own description, ranked by score: 2 similar pairs (0.773 with buscar_cliente, 0.617 with
    # buscar_producto), no negative delimitation (0.773, its closest look-alike), its numero format, and the
    # look-alike name buscar_pedido / buscar_producto (no score)
    assert [f["rule"] for f in pedido["findings_a"]] == [
        "similar_pair",
        "no_negative_delimitation",
        "similar_pair",
        "argument_format",
        "lookalike_pair",
    ]
    assert pedido["findings_b"] == []
    # the page, versions picked by query parameters, in either order
    html = c.get("/toolsets/atencion_cliente", params={"a": "v2", "b": "v1"}, headers=HTML).text
    assert html.count('class="desc-diff"') == 7 and "Lint of A" in html and "v2: 0 findings" in html
    assert "v1: 25 findings" in html
    assert c.get("/toolsets/atencion_cliente", params={"a": "nope"}, headers=HTML).status_code == 404
    assert c.get("/api/toolsets/atencion_cliente/lint", params={"version": "v2"}).json()["findings"] == []


def test_schema_changes_and_a_single_version(client: tuple[TestClient, int, int]) -> None:
    c, _, _ = client
    doc = load_suite_document(EXAMPLES / "suite_v2.yaml")
    tools = doc["toolset"]["tools"]
    tools[1] = {**tools[1], "parameters": {**tools[1]["parameters"], "properties": {"id": {"type": "string"}}}}
    doc["name"], doc["toolset"]["label"] = "schema-changed", "v2-string-id"
    # the cases still expect an integer id, which the changed schema rejects: a mistake the suite check names
    refused = c.post("/api/runs", json={"name": "v3", "suite": doc})
    assert refused.status_code == 422 and "ver_saldo" in refused.text
    assert c.post("/api/runs", json={"name": "v3", "suite": doc, "lenient": True}).status_code == 201
    detail = c.get("/api/toolsets/atencion_cliente/versions", params={"a": "v2", "b": "v2-string-id"}).json()
    saldo = next(t for t in detail["tools"] if t["name"] == "ver_saldo")
    assert saldo["change"] == "changed" and saldo["schema_changes"] == [
        {"path": "/properties/id/type", "op": "changed", "a": '"integer"', "b": '"string"'}
    ]
    page = c.get("/toolsets/atencion_cliente", params={"a": "v2", "b": "v2-string-id"}, headers=HTML).text
    assert "<td><code>/properties/id/type</code></td><td>changed</td>" in page  # read as SchemaChangeView
    one = {
        "name": "solo",
        "toolset": {
            "name": "solo-tools",
            "tools": [
                {"name": "buscar", "description": "Busca <b>información</b>."},
                {"name": "consultar", "description": "Busca información."},
            ],
        },
        "cases": [],
    }
    assert c.post("/api/runs", json={"name": "solo", "suite": one}).status_code == 201
    html = c.get("/toolsets/solo-tools", headers=HTML).text
    assert "buscar and consultar read alike" in html and "<b>información</b>" not in html
