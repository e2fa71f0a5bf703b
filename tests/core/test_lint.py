"""The description linter: exact findings on the example toolsets (v1 poor,
v2 rewritten with the seed's four patterns), Spanish and English text, the
``--json`` contract and exit statuses, and ``toollens toolset add``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from typer.testing import CliRunner

from app.cli import cli
from app.core.advise.lint import RULES, lint_pairs, lint_toolset, load_lint_target, similarities
from app.core.suites.suite import load_toolset
from app.core.suites.tools import Toolset
from app.store.models import ToolsetVersion
from tests.resources import DATA, shared_data

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def keys(findings: list) -> list[tuple[str, str, tuple[str, ...], str | None]]:  # type: ignore[type-arg]
    return [(f.rule, f.tool, f.related, f.field) for f in findings]


V1_TOOLSET_FINDINGS = [  # ranked by score, then rule and tool; the findings without a score after
    ("similar_pair", "buscar_cliente", ("buscar_pedido",), None),  # 0.773
    ("no_negative_delimitation", "buscar_cliente", ("buscar_pedido", "buscar_producto", "verificar_compra"), None),
    ("no_negative_delimitation", "buscar_pedido", ("buscar_cliente", "buscar_producto"), None),
    ("similar_pair", "buscar_pedido", ("buscar_producto",), None),  # 0.617
    ("no_negative_delimitation", "buscar_producto", ("buscar_pedido", "buscar_cliente"), None),
    ("similar_pair", "buscar_cliente", ("buscar_producto",), None),  # 0.522
    ("similar_pair", "buscar_cliente", ("verificar_compra",), None),
    ("no_negative_delimitation", "verificar_compra", ("buscar_cliente",), None),
    ("argument_format", "buscar_cliente", (), "rut"),
    ("argument_format", "buscar_pedido", (), "numero"),
    ("argument_format", "emitir_nota_credito", (), "id"),
    ("argument_format", "emitir_nota_credito", (), "monto"),
    ("argument_format", "iniciar_devolucion", (), "fecha_retiro"),
    ("argument_format", "iniciar_devolucion", (), "numero"),
    ("argument_format", "ver_saldo", (), "id"),
    ("argument_format", "verificar_compra", (), "id"),
    ("argument_format", "verificar_compra", (), "numero"),
    ("missing_precondition", "emitir_nota_credito", ("verificar_compra",), None),
    ("missing_precondition", "ver_saldo", ("buscar_cliente",), None),
    # names that differ in one object word, one identifier each (rut / numero / consulta) shown by no example
    ("lookalike_pair", "buscar_cliente", ("buscar_pedido",), None),
    ("lookalike_pair", "buscar_cliente", ("buscar_producto",), None),
    ("lookalike_pair", "buscar_cliente", ("verificar_compra",), None),  # "X información del cliente" (0.75)
    ("lookalike_pair", "buscar_pedido", ("buscar_producto",), None),
]


def test_v1_gets_the_findings_that_v2_fixes() -> None:
    v1 = load_toolset(EXAMPLES / "toolset_v1.yaml")
    v2 = load_toolset(EXAMPLES / "toolset_v2.yaml")
    assert keys(lint_toolset(v1)) == V1_TOOLSET_FINDINGS
    assert lint_toolset(v2) == []


def test_similarity_scores_of_the_confused_pair() -> None:
    # "Busca información." vs "Busca información por texto.": the seed's buscar_pedido / buscar_producto
    v1 = similarities(load_toolset(EXAMPLES / "toolset_v1.yaml"))
    v2 = similarities(load_toolset(EXAMPLES / "toolset_v2.yaml"))
    pair = ("buscar_pedido", "buscar_producto")
    # stems {busca, infor} and {busca, infor, texto}; of 7 descriptions 3 say "busca", 4 "información", 1 "texto":
    # weights ln(8/3) = 0.981, ln(8/4) = 0.693, ln(8/1) = 2.079; Dice = 2 * 1.674 / (1.674 + 3.753) = 0.617.
    # Names: {<generic>, pedid} and {<generic>, produ}; of 7 names 4 have a generic verb (buscar x3, ver), 1 each
    # "pedid" and "produ": weights ln(7/4) = 0.560 and ln(7) = 1.946, 0.560 / (0.560 + 2 * 1.946) = 0.126.
    assert (v1[pair].name, v1[pair].description, v1[pair].score) == (0.126, 0.617, 0.617)
    assert v2[pair].description == 0.185 and v2[pair].score == 0.185
    assert (
        max(s.score for s in v2.values())
        < 0.5
        <= min(v1[p].score for p in (("buscar_cliente", "buscar_pedido"), ("buscar_cliente", "buscar_producto"), pair))
    )


def test_messages_name_the_pair_and_say_what_is_missing() -> None:
    found = lint_toolset(load_toolset(EXAMPLES / "toolset_v1.yaml"))
    [pair] = [p.findings for p in lint_pairs(found) if (p.a, p.b) == ("buscar_pedido", "buscar_producto")]
    assert [(f.rule, f.tool) for f in pair] == [
        ("similar_pair", "buscar_pedido"),
        ("no_negative_delimitation", "buscar_pedido"),
        ("no_negative_delimitation", "buscar_producto"),
        ("lookalike_pair", "buscar_pedido"),
    ]
    assert pair[-1].message.startswith(
        "buscar_pedido and buscar_producto: names that differ only in 'pedido' / "
        "'producto', and neither description shows what its numero / consulta"
    )
    assert pair[0].message.startswith("buscar_pedido and buscar_producto read alike (descriptions, similarity 0.62)")
    by_field = {(f.tool, f.field): f.detail["missing"] for f in found if f.rule == "argument_format"}
    assert by_field[("buscar_pedido", "numero")] == ["pattern ^PED-\\d{5}$ (give an example that matches it)"]
    assert by_field[("iniciar_devolucion", "fecha_retiro")] == ["format date (say it, e.g. YYYY-MM-DD)"]
    assert by_field[("ver_saldo", "id")][0].startswith("integer type")


def test_suite_adds_its_case_pairs() -> None:
    toolset, pairs = load_lint_target(EXAMPLES / "suite_v1.yaml")
    found = [(f.tool, f.related) for f in lint_toolset(toolset, pairs) if f.rule == "missing_precondition"]
    assert found == [
        ("emitir_nota_credito", ("verificar_compra",)),
        ("iniciar_devolucion", ("buscar_pedido",)),
        ("ver_saldo", ("buscar_cliente",)),
        ("verificar_compra", ("buscar_cliente",)),
    ]
    toolset2, pairs2 = load_lint_target(EXAMPLES / "suite_v2.yaml")
    assert pairs2 == pairs and lint_toolset(toolset2, pairs2) == []


ENGLISH_POOR = [
    {
        "name": "get_order",
        "description": "Gets information.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "pattern": "^ORD-\\d{4}$"}}},
    },
    {
        "name": "get_product",
        "description": "Gets information by text.",
        "parameters": {"type": "object", "properties": {"sort": {"type": "string", "enum": ["price", "rating"]}}},
    },
]
ENGLISH_GOOD = [
    {
        "name": "get_order",
        "description": "Look up one order by its number (ORD-1234). Not for catalogue products: use get_product.",
        "parameters": ENGLISH_POOR[0]["parameters"],
    },
    {
        "name": "get_product",
        "description": "Search the catalogue; sort by price or rating. Do not use it for orders: use get_order.",
        "parameters": ENGLISH_POOR[1]["parameters"],
    },
]


def test_english_descriptions() -> None:
    poor = lint_toolset(Toolset.from_list(ENGLISH_POOR))
    assert keys(poor) == [
        ("similar_pair", "get_order", ("get_product",), None),
        ("no_negative_delimitation", "get_order", ("get_product",), None),
        ("no_negative_delimitation", "get_product", ("get_order",), None),
        ("argument_format", "get_order", (), "order_id"),
        ("argument_format", "get_product", (), "sort"),
    ]
    # shared words weigh ln(3/2), the one word of its own ln(3): 2 * 2 * 0.405 / (2 * 0.405 + 3 * 0.405 + 1.099)
    assert poor[0].score == 0.596
    assert poor[-1].detail["missing"] == ["allowed values price, rating"]
    assert lint_toolset(Toolset.from_list(ENGLISH_GOOD)) == []
    assert keys(lint_toolset(Toolset.from_list(ENGLISH_GOOD), [("get_order", "get_product")])) == [
        ("missing_precondition", "get_product", ("get_order",), None)
    ]


def test_cli_json_contract_and_exit_status(tmp_path: Path) -> None:
    r = runner.invoke(cli, ["lint", str(EXAMPLES / "toolset_v1.yaml"), "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert set(data) == {"toolset", "version", "label", "tools", "language", "counts", "findings"}
    assert (data["toolset"], data["label"], data["tools"], data["language"]) == ("atencion_cliente", "v1", 7, "es")
    assert data["counts"] == {
        "similar_pair": 4,
        "no_negative_delimitation": 4,
        "argument_format": 9,
        "missing_precondition": 2,
        "unguarded_destructive": 0,
        "lookalike_pair": 4,
    }
    assert list(data["counts"]) == list(RULES)
    assert set(data["findings"][0]) == {"rule", "tool", "related", "field", "score", "message", "detail"}
    assert data["findings"][0]["score"] == 0.773
    r = runner.invoke(cli, ["lint", str(EXAMPLES / "toolset_v2.yaml"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["findings"] == []
    r = runner.invoke(cli, ["lint", str(EXAMPLES / "toolset_v2.yaml")])
    assert r.exit_code == 0 and "7 tools, 0 findings" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - name: x\n    description: 3\n    parameters: {type: nope}\n")
    r = runner.invoke(cli, ["lint", str(bad)])
    assert r.exit_code == 2 and "bad.yaml" in r.stderr
    r = runner.invoke(cli, ["lint", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "file not found" in r.stderr


def test_toolset_add_is_idempotent_by_content(db_url: str, tmp_path: Path) -> None:
    args = ["toolset", "add", str(EXAMPLES / "toolset_v1.yaml"), "--name", "banca", "--db", db_url]
    r = runner.invoke(cli, [*args, "--label", "v1"])
    assert r.exit_code == 0, r.output
    v1 = load_toolset(EXAMPLES / "toolset_v1.yaml").version
    assert f"toolset banca version {v1} (7 tools): added" in r.stderr
    r = runner.invoke(cli, [*args, "--label", "again"])  # same content: the same version, first label kept
    assert r.exit_code == 0 and "exists already (label 'v1')" in r.stderr
    # only the mocks differ: still the same version (a version is the contract the model reads)
    text = (EXAMPLES / "toolset_v1.yaml").read_text().replace("NC-40021", "NC-99999")
    (tmp_path / "t.yaml").write_text(text)
    r = runner.invoke(cli, ["toolset", "add", str(tmp_path / "t.yaml"), "--name", "banca", "--db", db_url])
    assert r.exit_code == 0 and "exists already" in r.stderr
    r = runner.invoke(
        cli, ["toolset", "add", str(EXAMPLES / "suite_v2.yaml"), "--name", "banca", "--label", "v2", "--db", db_url]
    )  # a suite file: its toolset
    assert r.exit_code == 0 and "added" in r.stderr
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(ToolsetVersion.toolset, ToolsetVersion.label, ToolsetVersion.hash).order_by(ToolsetVersion.id)
        ).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [
        ("banca", "v1", v1),
        ("banca", "v2", load_toolset(EXAMPLES / "toolset_v2.yaml").version),
    ]


@pytest.mark.parametrize("argv", [["--name", ""], []])
def test_toolset_add_needs_a_name(argv: list[str], tmp_path: Path) -> None:
    r = runner.invoke(
        cli, ["toolset", "add", str(EXAMPLES / "toolset_v1.yaml"), *argv, "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    assert r.exit_code == 2


TAU = DATA / "tau_bench_tool_schemas_airline_retail.json"


@shared_data(TAU)
def test_tau_bench_tools() -> None:
    domains = json.loads(TAU.read_text())
    airline = Toolset.from_list(domains["airline"])
    found = lint_toolset(airline)
    pairs = {(f.tool, f.related[0]): f.score for f in found if f.rule == "similar_pair"}
    # tau-bench gives both tools the same text: "Search direct flights between two cities on a specific date."
    assert pairs[("search_direct_flight", "search_onestop_flight")] == 1.0
    # retail: cancel_pending_order.reason's own description lists its enum ("either 'no longer needed' or
    # 'ordered by mistake'"), which the model reads: no finding
    retail = lint_toolset(Toolset.from_list(domains["retail"]))
    # lookalike_pair adds 8 and 6: the two flight searches, the three update_reservation_* tools, the
    # pending-order modifications, exchange vs modify of an order's items, the two user-id lookups
    assert len(found) == 29 and len(retail) == 23
    assert not [f for f in retail if (f.tool, f.field) == ("cancel_pending_order", "reason")]


def _tool(name: str, description: str, key: str) -> dict[str, object]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]},
    }


def _lookalikes(tools: list[dict[str, object]]) -> dict[tuple[str, ...], dict[str, object]]:
    return {f.tools: f.detail for f in lint_toolset(Toolset.from_list(tools)) if f.rule == "lookalike_pair"}


def test_lookalike_shape_reads_an_article_as_one_slot() -> None:
    # "una reserva" / "un pedido", "an order" / "a coupon": one sentence, whatever the article
    es = _lookalikes(
        [
            _tool("localizar_reserva", "Busca una reserva por su localizador.", "localizador"),
            _tool("consultar_pedido", "Busca un pedido por su número.", "numero"),
        ]
    )
    assert es == {("consultar_pedido", "localizar_reserva"): {"shape": "busca un X por su X", "similarity": 0.667}}
    en = _lookalikes(
        [
            _tool("coupon_lookup", "Looks up a coupon from its code.", "code"),
            _tool("order_lookup", "Looks up an order from its order number.", "order_number"),
        ]
    )
    assert [d["shape"] for d in en.values()] == ["looks up a X from its X"]


def test_lookalike_names_one_object_word_apart_with_unshown_keys() -> None:
    # the same operation on two objects, one identifier each, no example of either: the question's value
    # cannot tell them apart, only the noun (which a customer may not say: "purchase" for order)
    en = _lookalikes(
        [
            _tool("find_order", "Looks up an order from its order number.", "order_number"),
            _tool("find_booking", "Finds a booking by its locator and returns its details.", "locator"),
        ]
    )
    assert en == {
        ("find_booking", "find_order"): {
            "differ": ["booking", "order"],
            "keys": [["locator"], ["order_number"]],
            "similarity": 0.5,
        }
    }
    found = lint_toolset(
        Toolset.from_list(
            [
                _tool("cancelar_factura", "Cancela una factura dado su folio.", "folio"),
                _tool(
                    "cancelar_suscripcion",
                    "Anula una suscripción vigente a partir de su identificador.",
                    "suscripcion_id",
                ),
            ]
        )
    )
    [pair] = [f for f in found if f.rule == "lookalike_pair"]
    assert pair.message.startswith(
        "cancelar_factura and cancelar_suscripcion: names that differ only in 'factura' "
        "/ 'suscripcion', and neither description shows what its folio / suscripcion_id "
        "looks like"
    )


def test_lookalike_names_not_flagged_when_something_tells_them_apart() -> None:
    # each shows its value's shape: the question's value tells them apart
    assert (
        _lookalikes(
            [
                _tool("cancelar_factura", "Cancela una factura dado su folio (formato F123456).", "folio"),
                _tool(
                    "cancelar_suscripcion",
                    "Anula una suscripción vigente a partir de su identificador, como SUB-300412.",
                    "suscripcion_id",
                ),
            ]
        )
        == {}
    )
    # the differing word is what each description leads with (the operation): the question's verb tells them apart
    assert (
        _lookalikes(
            [
                _tool("follow_user", "Follow a user.", "username_to_follow"),
                _tool("unfollow_user", "Unfollow a user.", "username_to_unfollow"),
            ]
        )
        == {}
    )
    # the same identifier for both: its shape cannot help, and the verbs (said) differ
    assert (
        _lookalikes(
            [
                _tool("cancel_invoice", "Cancels an invoice given its invoice number.", "invoice_number"),
                _tool("update_invoice", "Updates the details of an invoice by its invoice number.", "invoice_number"),
            ]
        )
        == {}
    )
