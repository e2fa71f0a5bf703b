"""Wilson intervals, exact McNemar and word diffs, checked by hand."""

from __future__ import annotations

import math

import pytest

from app.core.reports.stats import mcnemar_exact, wilson_interval
from app.core.textdiff import Segment, word_diff


def test_wilson_interval_known_values() -> None:
    # published reference values: 5/10 -> (0.2366, 0.7634); 0/10 -> (0, 0.2775)
    lo, hi = wilson_interval(5, 10)  # type: ignore[misc]
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    lo, hi = wilson_interval(0, 10)  # type: ignore[misc]
    assert (lo, round(hi, 4)) == (0.0, 0.2775)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)  # type: ignore[index]
    assert wilson_interval(0, 0) is None


def test_mcnemar_exact_by_hand() -> None:
    # 1 vs 6 discordant pairs: 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * 8 / 128 = 0.125
    assert mcnemar_exact(1, 6) == pytest.approx(0.125)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    # 0 vs 10: 2 / 1024
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)


def _mcnemar_by_definition(only_a: int, only_b: int) -> float:
    n, k = only_a + only_b, min(only_a, only_b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


@pytest.mark.parametrize(("only_a", "only_b"), [(40, 60), (1450, 1550), (1000, 2000), (2999, 1), (1500, 1501)])
def test_mcnemar_exact_matches_the_definition(only_a: int, only_b: int) -> None:
    assert mcnemar_exact(only_a, only_b) == pytest.approx(_mcnemar_by_definition(only_a, only_b), rel=1e-9)


def test_mcnemar_exact_on_a_run_of_millions() -> None:
    # two runs of ~1.7M trajectories: 10^6 discordant pairs, 499,000 vs 501,000. The normal
    # approximation with continuity correction: z = (499,000.5 - 500,000) / 500 = -1.999,
    # p = 2 * Phi(-1.999) = 0.04561; the definition's big integers took minutes here
    z = (499_000.5 - 500_000) / math.sqrt(10**6 / 4)
    assert mcnemar_exact(499_000, 501_000) == pytest.approx(math.erfc(-z / math.sqrt(2)), rel=1e-3)
    assert mcnemar_exact(400_000, 600_000) == 0.0  # below the smallest float


def test_word_diff() -> None:
    d = word_diff("Busca información del cliente.", "Busca un cliente por su RUT.")
    assert "".join(s.text for s in d if s.op != "insert") == "Busca información del cliente."
    assert "".join(s.text for s in d if s.op != "delete") == "Busca un cliente por su RUT."
    assert Segment("equal", "Busca ") in d
    assert word_diff("igual", "igual") == [Segment("equal", "igual")]


def test_newcombe_interval_of_a_difference() -> None:
    from app.core.reports.stats import newcombe_interval

    # 59/69 -> 67/69: the difference's interval excludes 0 (though the two Wilson intervals overlap)
    lo, hi = newcombe_interval(59, 69, 67, 69)  # type: ignore[misc]
    assert 0 < lo < 67 / 69 - 59 / 69 < hi
    assert (round(lo, 3), round(hi, 3)) == (0.02, 0.22)
    lo, hi = newcombe_interval(5, 10, 6, 10)  # type: ignore[misc]
    assert lo < 0 < hi
    assert newcombe_interval(0, 0, 1, 2) is None
