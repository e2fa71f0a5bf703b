"""Aggregation into the SPEC §5 JSON shape, and pass^k by hand."""

from __future__ import annotations

from math import comb

import pytest

from app.core.reports.evaluate import score_trajectories
from app.core.reports.report import pass_hat_k, rounded_pass_hat_k
from tests.factories import FAIL_SALDO, OK_CLIENTE, OK_SALDO, banking_suite, call, record


def test_pass_hat_k_matches_the_formula_by_hand() -> None:
    # case A: 4 trials, 3 passes; case B: 2 trials, 1 pass; case C: 3 trials, 0 passes
    got = pass_hat_k([(4, 3), (2, 1), (3, 0)])
    assert got[1] == pytest.approx((3 / 4 + 1 / 2 + 0) / 3)
    assert got[2] == pytest.approx((comb(3, 2) / comb(4, 2) + comb(1, 2) / comb(2, 2) + 0) / 3)  # (0.5+0+0)/3
    assert got[3] == pytest.approx((comb(3, 3) / comb(4, 3) + 0) / 2)  # only A and C have 3 trials: 0.125
    assert got[4] == pytest.approx(0.0)
    assert set(got) == {1, 2, 3, 4}


def test_report_keys_and_hand_computed_figures() -> None:
    suite = banking_suite()
    trajs = [
        # trial 0: perfect
        record(calls=[OK_CLIENTE, OK_SALDO], answer="Tu saldo es $142.900", trial=0),
        # trial 1: string id (schema), then hallucinated tool
        record(
            calls=[OK_CLIENTE, call("ver_saldo", {"id": "8812"}), call("cancelar_pedido", {})], answer="Listo", trial=1
        ),
        # a fault: recovered by retry
        record(
            calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO],
            answer="Tu saldo es $142.900",
            fault={"step": 1, "kind": "http_503"},
        ),
        # a fault: hallucinated answer
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo es $142.900", fault={"step": 1, "kind": "http_503"}),
    ]
    data = score_trajectories(suite, trajs).to_json()
    # calls: 2 + 3 + 3 + 2 = 10; one hallucinated; existing 9
    assert data["hallucinated_tools"] == {"num": 1, "den": 10}
    assert data["schema_validity"] == {"num": 8, "den": 9}
    # selection: all 9 existing calls on their aligned tool
    assert data["selection_precision"] == {"num": 9, "den": 9}
    assert data["selection_recall"] == {"num": 8, "den": 8}
    # args: calls aligned to the same tool with a valid schema: 9 - 1 = 8, all exact
    assert data["argument_accuracy"] == {"num": 8, "den": 8}
    assert data["recovery"] == {"num": 1, "den": 2}
    assert data["hallucination_after_error"] == {"num": 1, "den": 2}
    assert data["outcomes"] == {"recovered": 1, "gave_up": 0, "hallucinated": 1, "confused": 0}
    assert {"expected": "(extra)", "called": "cancelar_pedido", "count": 1, "hallucinated": True} in data["confusion"]
    # pass^k per case: saldo-001 has 4 trajectories, 2 passed: C(2,k)/C(4,k) = 1/2, 1/6, 0, 0
    assert data["pass_hat_k"] == {"1": 0.5, "2": 0.1667, "3": 0.0, "4": 0.0}
    assert [c["passed"] for c in data["cases"]] == [True, False, True, False]
    # ver_saldo with a string id never succeeded: its step is not done (as after the unrecovered fault)
    assert data["cases"][1]["failures"] == ["step_not_done", "schema", "hallucinated_tool"]
    assert data["failures"] == {"hallucinated_tool": 1, "recovery_hallucinated": 1, "schema": 1, "step_not_done": 2}
    # both faults were injected: the split by source holds them all
    assert data["recovery_by_source"]["injected"] == {
        "recovery": {"num": 1, "den": 2},
        "hallucination_after_error": {"num": 1, "den": 2},
    }
    assert data["recovery_by_source"]["tool"]["recovery"] == {"num": 0, "den": 0}


def test_zero_denominators_are_reported_as_is() -> None:
    data = score_trajectories(banking_suite(), [record(case_id="unknown-case", calls=[], answer="hola")]).to_json()
    # no trajectory had a reference: the figures that need one say so (an added key), the others are 0 / 0
    assert data["selection_precision"] == {"num": 0, "den": 0, "no_reference": True}
    assert data["argument_accuracy"] == data["selection_recall"] == {"num": 0, "den": 0, "no_reference": True}
    assert data["recovery"] == {"num": 0, "den": 0} and data["with_reference"] == 0
    # with a reference, an empty denominator is only that
    data = score_trajectories(banking_suite(), [record(calls=[], answer="hola")]).to_json()
    assert data["argument_accuracy"] == {"num": 0, "den": 0} and data["with_reference"] == 1


def test_counters_round_trip_and_add_up() -> None:
    suite = banking_suite()
    a = [
        record(calls=[OK_CLIENTE, OK_SALDO], answer="Tu saldo es $142.900"),
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo es $142.900", fault={"step": 1, "kind": "http_503"}),
    ]
    b = [record(calls=[OK_CLIENTE, call("ver_saldo", {"id": "x"}), call("nope")], answer="no pude", trial=1)]
    whole = score_trajectories(suite, a + b, keep_cases=False)
    from app.core.reports.report import Report

    rebuilt = Report.from_counters([*score_trajectories(suite, a).counters(), *score_trajectories(suite, b).counters()])
    assert rebuilt.to_json() == whole.to_json()


def test_pass_hat_k_equals_the_binomial_formula_on_many_cases() -> None:
    import random

    rng = random.Random(3)
    groups = [(n, rng.randint(0, n)) for n in (rng.randint(1, 12) for _ in range(60))]
    got = pass_hat_k(groups)
    for k in range(1, 13):
        eligible = [(n, c) for n, c in groups if n >= k]
        assert got[k] == pytest.approx(sum(comb(c, k) / comb(n, k) for n, c in eligible) / len(eligible), abs=1e-12)


def test_pass_hat_k_is_bit_for_bit_the_loop_it_replaced() -> None:
    """The products and sums are made at C speed, in the order the plain loop made them: the same floats."""

    def loop(trials: list[tuple[int, int]]) -> dict[int, float]:
        top = max(n for n, _ in trials)
        sums, with_n = [0.0] * (top + 2), [0] * (top + 2)
        for n, c in trials:
            with_n[n] += 1
            ratio = 1.0
            for k in range(1, min(c, n) + 1):
                ratio *= (c - k + 1) / (n - k + 1)
                sums[k] += ratio
        eligible, out = 0, {}
        for k in range(top, 0, -1):
            eligible += with_n[k]
            out[k] = sums[k] / eligible
        return out

    trials = [(n, (n * 7 + i) % (n + 1)) for i, n in enumerate((1, 3, 3, 40, 97, 500, 500, 2000, 9035))]
    got = pass_hat_k(trials)
    assert got == loop(trials) and len(got) == 9035
    assert got[1] == sum(c / n for n, c in trials) / len(trials)
    # a third passed of 9,035 trials: the products underflow to 0.0 at k = 587 to 613 (of 2,748 to 2,896
    # passes), where the sums stop growing: the same floats as the loop that multiplied on to k = 2,896
    low = [(9035, 2800), (9033, 2748), (9034, 2896), (12, 5)]
    got = pass_hat_k(low)
    assert got == loop(low) and got[611] > 0.0 and got[612] == 0.0 == got[9035]
    assert rounded_pass_hat_k(low) == {str(k): round(v, 4) for k, v in loop(low).items()}
