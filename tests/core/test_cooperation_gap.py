"""The cooperation gap's arithmetic by hand (app/core/reports/profiles.py), and how the
report counts a conversation under a profile (app/core/reports/report.py)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.reports.profiles import cooperation_gap
from app.core.reports.report import Report
from app.core.score.scoring import TrajectoryScore


def test_the_gap_and_its_band_by_hand() -> None:
    gap = cooperation_gap(
        {
            "cooperative": {"trials": {"a": [3, 3], "b": [3, 1]}},
            "impatient": {"trials": {"a": [3, 2], "b": [3, 0]}, "acted": 2, "user_errors": 1, "blame": {"user": 2}},
            "drip_feed": {"trials": {"a": [3, 3], "b": [3, 1]}},
        }
    )
    assert gap is not None and gap.k == 3
    rows = {r.profile: r for r in gap.rows}
    assert [r.profile for r in gap.rows] == ["cooperative", "impatient", "drip_feed"]  # PROFILES' order
    # cooperative: pass^1 = 4/6; pass^3 = (C(3,3)/C(3,3) + C(1,3)/C(3,3)) / 2 = 0.5
    assert rows["cooperative"].at(1) == pytest.approx(4 / 6) and rows["cooperative"].at(3) == pytest.approx(0.5)
    # impatient: pass^1 = 2/6; pass^2 = (C(2,2)/C(3,2) + 0) / 2 = 1/6; pass^3 = 0
    assert rows["impatient"].at(2) == pytest.approx(1 / 6) and rows["impatient"].at(3) == 0
    assert rows["impatient"].gap_1 == pytest.approx(2 / 6 - 4 / 6) and rows["impatient"].gap_k == pytest.approx(-0.5)
    ci = rows["impatient"].gap_1_ci
    assert ci is not None and ci[0] < -1 / 3 < ci[1]
    assert rows["drip_feed"].gap_1 == 0 and rows["drip_feed"].gap_k == 0
    assert gap.band_k == (0.0, 0.5) and gap.band_gap == (-0.5, 0.0) and gap.spread == 0.5
    assert (rows["impatient"].acted, rows["impatient"].user_errors, rows["impatient"].blamed_on_user) == (2, 1, 2)


def test_the_gap_needs_cooperative_conversations() -> None:
    assert cooperation_gap({"impatient": {"trials": {"a": [1, 0]}}}) is None
    alone = cooperation_gap({"cooperative": {"trials": {"a": [2, 1]}}})
    assert alone is not None and alone.band_k is None and len(alone.rows) == 1


def gap_data(deltas: dict[str, float], k: int = 4) -> dict[str, Any]:
    """Compare's ``cooperation`` for these B − A per profile (both runs ran every one)."""
    others = [d for p, d in deltas.items() if p != "cooperative"]
    return {
        "k": k,
        "profiles": [
            {"profile": p, "a": 0.5, "b": 0.5 + d, "delta": d, "a_gap": None, "b_gap": None} for p, d in deltas.items()
        ],
        "same_profiles": True,
        "delta_cooperative": deltas["cooperative"],
        "delta_band": [min(others), max(others)],
        "b_ahead": sum(1 for d in deltas.values() if d > 1e-12),
        "b_behind": sum(1 for d in deltas.values() if d < -1e-12),
        "compared": len(deltas),
    }


def compared(deltas: dict[str, float]) -> str:
    """Compare's cooperation sentence for these B − A per profile."""
    from app.core.reports.cooperation import compare_gap

    gap = compare_gap(gap_data(deltas))
    assert gap is not None
    return gap.sentence


def test_compare_says_whether_the_change_holds_for_every_user() -> None:
    assert compared({"cooperative": 0.25, "impatient": 0.5}).endswith("; B ahead under every profile")
    assert compared({"cooperative": -0.25, "impatient": -0.5}).endswith("; B behind under every profile")
    split = compared({"cooperative": 0.25, "impatient": -0.5})
    assert split.endswith("; B ahead under 1, behind under 1 of 2 profiles: the change does not hold for every user")
    # no change under any profile is no sign of a change that does not hold
    assert compared({"cooperative": 0.0, "impatient": 0.0}).endswith("; B level with A under every profile")
    level_here = compared({"cooperative": 0.25, "impatient": 0.0})
    assert level_here.endswith(
        "; B ahead under 1, level under 1 of 2 profiles: the change does not hold for every user"
    )


def test_compare_places_each_profile_s_change_on_a_band() -> None:
    from app.core.reports.cooperation import compare_gap

    data = gap_data({"cooperative": 0.25, "impatient": -0.5, "drip_feed": 0.1}, k=2)
    gap = compare_gap(data)
    assert gap is not None
    # the axis runs from B − A = −1 (x 0) through 0 (x 100) to +1 (x 200)
    assert gap.band == pytest.approx((50.0, 110.0)) and gap.cooperative_x == 125.0
    assert [r.x for r in gap.rows] == pytest.approx([125.0, 50.0, 110.0])
    assert compare_gap({**data, "delta_band": None}).band is None  # type: ignore[union-attr]


def score(case: str, passed: bool, profile: str | None, broken: bool = False) -> TrajectoryScore:
    ts = TrajectoryScore(case, 0, True, [], passed=passed)
    ts.user_profile = profile
    ts.user_acts = [{"kind": "ended_early", "detail": ""}] if broken else None
    ts.user_error = [{"kind": "stopped_early", "detail": ""}] if broken else None
    return ts


def test_a_report_counts_every_profiled_conversation_and_keeps_profiles_apart_in_pass_k() -> None:
    r = Report()
    for ts in (
        score("a", True, "cooperative"),
        score("a", True, "cooperative"),
        score("a", True, "impatient"),
        score("a", False, "impatient", broken=True),
        score("b", True, None),
    ):
        r.add(ts)
    # the user's broken conversation is left out of the headline, counted in its profile's figures
    assert r.trials == {("a", ""): [2, 2], ("a", "impatient"): [1, 1], ("b", ""): [1, 1]}
    again = Report.from_counters(r.counters())
    assert (
        again.profiles_json()
        == r.profiles_json()
        == {
            "cooperative": {
                "trials": {"a": [2, 2]},
                "acted": 0,
                "user_errors": 0,
                "blame": {"agent": 0, "user": 0, "task": 0},
            },
            "impatient": {
                "trials": {"a": [2, 1]},
                "acted": 1,
                "user_errors": 1,
                "blame": {"agent": 0, "user": 0, "task": 0},
            },
        }
    )
    assert "profiles" in r.to_json() and "profiles" not in Report().to_json()


def test_a_report_pairs_each_profiled_conversation_with_the_cooperative_trial_its_record_names() -> None:
    from app.core.errors import InvalidTrajectory
    from app.core.records import parse_record

    r = Report()
    for case, trial, ok, profile, mirror in (
        ("a", 0, True, "cooperative", None),
        ("a", 1, False, "cooperative", None),
        ("a", 4, False, "impatient", 0),  # passed only in cooperative trial 0
        ("a", 5, True, "impatient", 1),  # passed only here
        ("a", 6, True, "impatient", 0),  # both passed: no flip
        ("a", 7, False, "impatient", 3),  # no cooperative trial 3: left out
        ("a", 8, False, "drip_feed", None),
    ):  # a record without the key: no pairing
        ts = score(case, ok, profile)
        ts.trial = trial
        ts.user_mirror_trial = parse_record(
            {"case_id": case, "trial": trial, "user_profile": profile, "user_mirror_trial": mirror}
        ).user_mirror_trial
        r.add(ts)
    profiles = r.profiles_json()
    assert profiles["impatient"]["paired"] == [1, 1]
    assert "paired" not in profiles["drip_feed"] and "paired" not in profiles["cooperative"]
    gap = cooperation_gap(profiles)
    assert gap is not None and {x.profile: (x.paired, x.paired_p) for x in gap.rows} == {
        "cooperative": (None, None),
        "impatient": ((1, 1), 1.0),
        "drip_feed": (None, None),
    }
    for bad in (-1, True, "0", 1.0):
        with pytest.raises(InvalidTrajectory, match="user_mirror_trial"):
            parse_record({"case_id": "a", "user_mirror_trial": bad})


def test_a_profiled_reports_headline_counts_the_cooperative_conversations_by_hand() -> None:
    """pass^k of a run with profiles reads as a run made without them; every conversation's kept aside."""
    r = Report()
    for ts in (
        score("a", True, "cooperative"),
        score("a", False, "cooperative"),
        score("a", False, "impatient"),
        score("a", False, "impatient"),
        score("b", True, None),
    ):
        r.add(ts)
    # by hand, the cooperative conversations: a 1 of 2 → 0.5, b 1 of 1 → 1: pass^1 = 0.75; pass^2: a alone,
    # C(1,2)/C(2,2) = 0. Every conversation ("a" under impatient a case of its own, 0 of 2): pass^1 =
    # (0.5 + 1 + 0) / 3 = 0.5 (main's headline), pass^2 = (0 + 0) / 2 = 0
    data = r.to_json()
    assert data["pass_hat_k"] == {"1": 0.75, "2": 0.0}
    assert data["all_profiles"] == {"scored": 5, "passed": 2, "pass_hat_k": {"1": 0.5, "2": 0.0}}
    again = Report.from_counters(r.counters()).to_json()  # what a store computes from the counters
    assert (again["pass_hat_k"], again["all_profiles"]) == (data["pass_hat_k"], data["all_profiles"])
    plain = Report()  # a run without profiles: no key added, its pass^k over every trajectory
    for ts in (score("a", True, None), score("a", False, None), score("b", True, "cooperative")):
        plain.add(ts)
    assert "all_profiles" not in plain.to_json() and plain.to_json()["pass_hat_k"] == {"1": 0.75, "2": 0.0}
