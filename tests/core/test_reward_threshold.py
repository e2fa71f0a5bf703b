"""The reward threshold of imported runs: a benchmark's reward passes a
trajectory, and makes its recovery from a tool error a success, from 1 up;
any reward below 1 (0.5, 0.99) fails it, whatever else it did right.

Hand-built trajectories scored through the public API (``Scorer``,
``score_trajectories``): a call to ``get_weather`` fails at run time (the
fault of an imported trace), the retry succeeds, and the answer states what
the retry returned, so only the reward decides."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.records import Trajectory, parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.score.scoring import Scorer
from app.core.suites.suite import Suite, parse_suite

SUITE: dict[str, Any] = {
    "name": "weather",
    "toolset": [
        {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "mock": "18 C, cloudy",
        }
    ],
    "cases": [
        {
            "id": "lima",
            "question": "Weather in Lima?",
            "expected_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}],
            "match": "subset",
        }
    ],
}
FAILED = {
    "name": "get_weather",
    "arguments": {"city": "Lima"},
    "observation": "Error: upstream timeout",
    "error": {"kind": "error", "message": "Error: upstream timeout"},
}
RETRY = {"name": "get_weather", "arguments": {"city": "Lima"}, "observation": "18 C, cloudy"}


def suite() -> Suite:
    return parse_suite(SUITE)


def recovered_run(reward: float | None, trial: int = 0) -> Trajectory:
    return parse_record(
        {
            "case_id": "lima",
            "trial": trial,
            "question": "Weather in Lima?",
            "calls": [FAILED, RETRY],
            "answer": "18 C and cloudy in Lima.",
            "reward": reward,
        }
    )


def clean_run(reward: float) -> Trajectory:
    return parse_record(
        {
            "case_id": "lima",
            "question": "Weather in Lima?",
            "calls": [RETRY],
            "answer": "18 C and cloudy in Lima.",
            "reward": reward,
        }
    )


@pytest.mark.parametrize(
    ("reward", "passed", "outcome"),
    [
        (0.5, False, "confused"),
        (0.99, False, "confused"),
        (1.0, True, "recovered"),
        (1.5, True, "recovered"),
    ],
)
def test_reward_from_one_up_passes_and_recovers(reward: float, passed: bool, outcome: str) -> None:
    ts = Scorer(suite()).score(recovered_run(reward))
    assert ts.fault_step == 0
    assert ts.outcome is not None and ts.outcome.outcome == outcome
    assert ts.outcome.evidence["reward"] == reward
    assert ts.passed is passed
    assert ts.failures == ([] if passed else ["recovery_confused"])
    clean = Scorer(suite()).score(clean_run(reward))  # no fault: the reward alone decides the pass
    assert clean.outcome is None and clean.failures == [] and clean.passed is passed


def test_without_a_reward_the_grounded_retry_is_the_recovery() -> None:
    """The control: the same run with no reward passes on what it did."""
    ts = Scorer(suite()).score(recovered_run(None))
    assert ts.outcome is not None and ts.outcome.outcome == "recovered" and ts.passed


def test_the_report_counts_the_threshold() -> None:
    runs = [recovered_run(r, trial=n) for n, r in enumerate([0.5, 0.99, 1.0, 1.5])]
    report = score_trajectories(suite(), runs).to_json()
    assert [c["passed"] for c in report["cases"]] == [False, False, True, True]
