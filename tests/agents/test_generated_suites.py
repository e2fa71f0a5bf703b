"""The stand-in judged on suites no one tuned on (issue 44, item 3): seeded toolsets written from the
phrasing pools of tests/phrasing_pools (never read by app/). A small count here; bench/generated_bench.py
and bench/generated_fix_bench.py run many (docs/fix.md reports them, held-out seeds apart)."""

from __future__ import annotations

from app.agents.reading import read_toolset
from app.core.lint import lint_toolset
from app.core.suite import parse_suite
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
    forms = ["NO sirve para pedidos: usa buscar_pedido.", "No la uses con un pedido; en su lugar usa buscar_pedido.",
             "Los pedidos no se buscan aquí.", "Para un pedido, usa buscar_pedido.", "Never for orders (pedidos).",
             "Does not look up pedidos; use buscar_pedido instead.", "Sin pedidos."]
    for form in forms:
        toolset = parse_suite({"name": "s", "toolset": {"name": "t", "tools": [
            {"name": "ver_saldo", "description": f"Muestra el saldo. {form}"},
            {"name": "buscar_pedido", "description": "Busca un pedido."},
            {"name": "buscar_cliente", "description": "Busca un cliente."}]}, "cases": []}).toolset
        assert "pedid" not in read_toolset(toolset).content["ver_saldo"], form


def test_lint_flags_the_pair_the_stand_in_confuses_most() -> None:
    flagged = 0
    for seed in SEEDS:
        suite = generate(seed)
        top = most_confused(cells(suite.document, trials=3), 1)
        found = {frozenset(f.tools) for f in lint_toolset(parse_suite(suite.document).toolset)
                 if f.rule in ("lookalike_pair", "similar_pair")}
        flagged += not top or frozenset(top[0]) in found
    assert flagged >= 6
