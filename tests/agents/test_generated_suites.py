"""The stand-in judged on suites no one tuned on (issue 44, item 3): seeded toolsets written from the
phrasing pools of tests/phrasing_pools (never read by app/). A small count here; bench/generated_bench.py
and bench/generated_fix_bench.py run many (docs/fix.md reports them, held-out seeds apart)."""

from __future__ import annotations

import pytest

from app.agents.reading import read_toolset
from app.core.advise.lint import lint_toolset
from app.core.suites.suite import parse_suite
from tests.generated_suites import cells, delimited, generate, most_confused, pasted

SEEDS = range(100, 108)  # held out: no rule was tuned on them


def test_generated_suites_are_seeded_and_in_both_languages() -> None:
    a, b = generate(3), generate(3)
    assert a.document == b.document and a.language == "en" and generate(4).language == "es"
    assert all(5 <= len(generate(s).tools) <= 30 for s in SEEDS)


def test_a_pasted_sentence_changes_nothing_and_a_targeted_delimitation_lowers_confusions() -> None:
    lowered = 0
    for seed in SEEDS:
        suite = generate(seed)
        base = cells(suite.document, trials=3)
        assert cells(pasted(suite), trials=3) == base, seed  # the same calls, trial by trial
        lowered += sum(cells(delimited(suite, most_confused(base)), trials=3).values()) < sum(base.values())
    assert lowered >= 5  # 5 of 8 on these seeds, 3 trials (bench: the distribution over many)


def test_a_word_in_a_negated_clause_never_raises_its_tool() -> None:
    """Whatever the wording, "pedido" written in a negated or redirecting clause is no content of the tool."""
    forms = [
        "NO sirve para pedidos: usa buscar_pedido.",
        "No la uses con un pedido; en su lugar usa buscar_pedido.",
        "Los pedidos no se buscan aquí.",
        "Para un pedido, usa buscar_pedido.",
        "Never for orders (pedidos).",
        "Does not look up pedidos; use buscar_pedido instead.",
        "Sin pedidos.",
    ]
    for form in forms:
        toolset = parse_suite(
            {
                "name": "s",
                "toolset": {
                    "name": "t",
                    "tools": [
                        {"name": "ver_saldo", "description": f"Muestra el saldo. {form}"},
                        {"name": "buscar_pedido", "description": "Busca un pedido."},
                        {"name": "buscar_cliente", "description": "Busca un cliente."},
                    ],
                },
                "cases": [],
            }
        ).toolset
        assert "pedid" not in read_toolset(toolset).content["ver_saldo"], form


def test_lint_flags_the_pair_the_stand_in_confuses_most() -> None:
    flagged = 0
    for seed in SEEDS:
        suite = generate(seed)
        top = most_confused(cells(suite.document, trials=3), 1)
        found = {
            frozenset(f.tools)
            for f in lint_toolset(parse_suite(suite.document).toolset)
            if f.rule in ("lookalike_pair", "similar_pair")
        }
        flagged += not top or frozenset(top[0]) in found
    assert flagged >= 6


def _reading(*tools: tuple[str, str], schema: dict | None = None):  # type: ignore[no-untyped-def]
    return read_toolset(
        parse_suite(
            {
                "name": "s",
                "toolset": {
                    "name": "t",
                    "tools": [
                        {"name": n, "description": d, **({"parameters": schema} if schema else {})} for n, d in tools
                    ],
                },
                "cases": [],
            }
        ).toolset
    )


def test_declared_preconditions_are_read_clause_by_clause() -> None:
    forms = {
        "Requiere haber llamado a buscar_cliente.": True,
        "Solo después de buscar_cliente.": True,
        "Call buscar_cliente first.": True,
        "Devuelve el saldo; antes obtén el id con buscar_cliente.": True,
        "NO llames antes a buscar_cliente.": False,
        "Not for clients: use buscar_cliente.": False,
        "Devuelve el saldo. Primero confirma con el usuario.": False,
    }
    for text, stated in forms.items():
        reading = _reading(("ver_saldo", text), ("buscar_cliente", "Busca un cliente."))
        assert (("ver_saldo", "buscar_cliente") in reading.preconditions) is stated, text


def test_a_value_of_the_declared_format_goes_to_the_tools_taking_that_identifier() -> None:
    """Two tools alike but for their argument: the question's PED-40213 fits buscar_pedido's pattern (one
    tool of three takes numero: ln 3), so the rival weighs e^(-2 ln 3) = 1/9 against it; SKU-310 has the
    shape of the example buscar_producto's description writes ("formato SKU-123"), the same way (a value's
    letters are no word)."""
    schema_pedido = {"type": "object", "properties": {"numero": {"type": "string", "pattern": r"^PED-\d{5}$"}}}
    reading = read_toolset(
        parse_suite(
            {
                "name": "s",
                "toolset": {
                    "name": "t",
                    "tools": [
                        {"name": "buscar_pedido", "description": "Busca por código.", "parameters": schema_pedido},
                        {"name": "buscar_producto", "description": "Busca por código (formato SKU-123)."},
                        {"name": "ver_saldo", "description": "Muestra el saldo."},
                    ],
                },
                "cases": [],
            }
        ).toolset
    )
    assert reading.rivals("¿Me ayudas con PED-40213?", "buscar_pedido")["buscar_producto"] == pytest.approx(1 / 9)
    assert reading.rivals("¿Me ayudas con SKU-310?", "buscar_producto")["buscar_pedido"] == pytest.approx(1 / 9)
