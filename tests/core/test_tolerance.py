"""Each tolerance rule accepts what it should and rejects what it should."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.suites.tolerance import Mismatch, compare_arguments, compile_comparison, parse_date, parse_rule


@pytest.mark.parametrize(
    ("rule", "expected", "accept", "reject"),
    [
        ("exact", "Ana Rojas", ["ana rojas", "  ANA ROJAS "], ["Ana Rojas S.", 1]),
        ("exact", 8812, [8812, 8812.0], ["8812", True, 8813]),
        ("exact", True, [True], [1, "true"]),
        ("ignore", "x", ["anything", None, 5], []),
        ({"number": {"abs": 0.5}}, 10, [10, 10.4, 9.5], [10.6, "10"]),
        ({"number": {"rel": 0.01}}, 1000, [1009, 991], [1011, 989]),
        ({"rule": "number", "abs": 1}, 5, [6, 4], [7]),
        (
            "date",
            "2024-03-05",
            ["05/03/2024", "5 de marzo de 2024", "March 5, 2024", "2024-03-05T10:00:00"],
            ["2024-05-03", "el martes pasado", 20240305],
        ),
        ({"one_of": [5, 10]}, None, [5, 10], [7]),
        ({"one_of": ["units", ""]}, None, ["Units"], ["cm"]),
        ({"regex": r"PED-\d{5}"}, None, ["PED-12345", "ped-12345"], ["PED-1234", "xPED-12345"]),
        ("contains", "devolución", ["Quiero una DEVOLUCION del producto", "devolución"], ["cambio", 3]),
        ({"contains": "roto"}, None, ["llegó roto"], ["llegó bien"]),
        ("set", ["a", "b", "b"], [["b", "a", "b"], ["B", "b", "A"]], [["a", "b"], ["a", "b", "c"], "ab"]),
    ],
)
def test_rule_accepts_and_rejects(rule: Any, expected: Any, accept: list[Any], reject: list[Any]) -> None:
    r = parse_rule(rule)
    for got in accept:
        assert r.check(got, expected), f"{rule} should accept {got!r}"
    for got in reject:
        assert not r.check(got, expected), f"{rule} should reject {got!r}"


def test_mismatch_records_field_rule_expected_and_got() -> None:
    rules = {"monto": parse_rule({"number": {"abs": 100}}), "motivo": parse_rule("ignore")}
    got = {"id": 8812, "monto": 15500, "motivo": "x"}
    assert compare_arguments(got, {"id": 8812, "monto": 15000, "motivo": "falla"}, rules) == [
        Mismatch("monto", "number(abs=100)", 15000, 15500)
    ]


def test_missing_field_fails_except_optional_one_of_and_ignore() -> None:
    rules = {"unit": parse_rule({"one_of": ["units", ""]}), "note": parse_rule("ignore")}
    assert compare_arguments({"base": 10}, {"base": 10}, rules) == []
    assert compare_arguments({}, {"base": 10}, rules) == [Mismatch("base", "exact", 10, None)]


@pytest.mark.parametrize("bad", ["fuzzy", {"number": {"abs": -1}}, {"regex": "("}, {"a": 1, "b": 2}, 3])
def test_bad_rules_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_rule(bad)


def test_month_first_dates_when_asked() -> None:
    assert parse_date("03/05/2024", dayfirst=False).isoformat() == "2024-03-05"  # type: ignore[union-attr]
    assert parse_date("03/05/2024").isoformat() == "2024-05-03"  # type: ignore[union-attr]


def test_one_of_can_compare_texts_as_bfcl_does() -> None:
    """``normalize: bfcl``: spaces and ``,./-_*^`` dropped, lowercased, ``'`` as ``"`` (BFCL's ast_checker),
    in lists and objects too; numbers by value; without it, ``one_of`` is the exact rule's."""
    bfcl = parse_rule({"rule": "one_of", "values": ["y=x**2", "", ["New York, NY", 2]], "normalize": "bfcl"})
    plain = parse_rule({"rule": "one_of", "values": ["y=x**2", ""]})
    for got in ("y = x^2", "Y=X**2", ["new york ny", 2.0], ""):
        assert bfcl.check(got, "y=x**2"), got
    for got in ("y=x^3", ["new york", 2], 2, ["new york ny"]):
        assert not bfcl.check(got, "y=x**2"), got
    assert not plain.check("y = x^2", "y=x**2")
    texts = {"function": parse_rule({"rule": "one_of", "values": ["4x + 7", "lambda x: 4x+7"], "normalize": "bfcl"})}
    compare = compile_comparison({"function": "4x + 7"}, texts)  # the scorer's prepared path
    assert (
        compare({"function": "4X+7"}) == []
        and compare_arguments({"function": "4X+7"}, {"function": "4x + 7"}, texts) == []
    )
    assert compare({"function": "4x+8"}) == [Mismatch("function", "one_of(bfcl)", ["4x + 7", "lambda x: 4x+7"], "4x+8")]
    with pytest.raises(ValueError, match="one_of normalize takes 'bfcl'"):
        parse_rule({"rule": "one_of", "values": ["a"], "normalize": "lower"})


def test_the_value_classes_built_per_call_compare_and_hash_by_value() -> None:
    """Their ``__init__`` is written out (native when compiled) where they were frozen dataclasses:
    equal fields, equal and the same hash; keyword and default arguments as the dataclass took them."""
    from app.core.score.alignment import Alignment
    from app.core.score.divergence import Divergence
    from app.core.score.grounding import Source
    from app.core.score.outcome import AfterFault, OutcomeResult

    assert Mismatch("date", "exact", "2024-03-05", 5) == Mismatch(
        field="date", rule="exact", expected="2024-03-05", got=5
    )
    assert len({Mismatch("a", "exact", 1, 2), Mismatch("a", "exact", 1, 2), Mismatch("a", "exact", 1, 3)}) == 2
    assert len({Source("call #1", "x"), Source("call #1", "x"), Source("call #2", "x")}) == 2
    assert Divergence("missing_step", "pay") == Divergence(kind="missing_step", tool="pay", other="", call=None)
    assert hash(Divergence("wrong_tool", "a", "b", 2, 1)) == hash(Divergence("wrong_tool", "a", "b", 2, 1))
    assert Divergence("wrong_tool", "a", "b", 2, 1).cause == ("wrong_tool", "a", "b")
    assert AfterFault("done").gave_up is False and AfterFault("x", gave_up=True) != AfterFault("x")
    assert OutcomeResult("recovered").evidence == {} and OutcomeResult("gave_up", {"k": 1}).evidence == {"k": 1}
    assert OutcomeResult("a").evidence is not OutcomeResult("a").evidence
    assert Alignment([0, None], [0]) == Alignment(step_of_call=[0, None], call_of_step=[0])
