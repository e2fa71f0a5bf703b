"""Lint, gate and gate-report review fixes: schema regexes are never run on
description text, @mentions and unknown failure names are inert in the
Markdown summary, a family the candidate did not measure fails the gate,
and dependency violations compare as a rate per checked trajectory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.core.advise import lint
from app.core.reports.gate import CaseRef, GateConfig, RunFigures, evaluate_gate, parse_gate_config
from app.core.reports.gate_report import _case_row, md


@pytest.mark.parametrize(
    ("description", "pattern", "mentioned"),
    [
        ("El número de póliza, p. ej. POL-0001.", "^POL-\\d{4}$", True),
        ("El número de póliza (POL y cuatro cifras).", "^POL-\\d{4}$", False),
        ("RUT con guion, como 12345678-9 o 7654321-K.", "^\\d{7,8}-[\\dkK]$", True),
        ("RUT sin puntos.", "^\\d{7,8}-[\\dkK]$", False),
        ("Formato ^[A-Z]{3}$ exacto.", "^[A-Z]{3}$", True),  # the pattern written out
        ("Código de tres letras: ABC.", "^(?:[A-Z]{3})$", True),  # a group without repeat is inlined
        ("Either ab or cd: ab.", "^(ab|cd)$", False),  # alternation: not checked against words
    ],
)
def test_pattern_mentions_without_running_the_regex(description: str, pattern: str, mentioned: bool) -> None:
    assert lint._mentions_pattern(description, pattern) is mentioned


def test_a_catastrophic_pattern_is_not_run_against_the_description() -> None:
    description = "a" * 26 + "b"  # a word that makes (a+)+$ backtrack ~2**26 steps in the re module (seconds)
    start = time.perf_counter()
    assert lint._mentions_pattern(description, "^(a+)+$") is False
    assert lint._mentions_pattern(description, "^" + "a*" * 30 + "b$") is True  # flat: matched without backtracking
    assert lint._mentions_pattern("a" * 60 + "c", "^" + "a*" * 30 + "b$") is False
    assert lint._mentions_pattern("x" * 10_000, "(x+x+)+y") is False
    assert time.perf_counter() - start < 0.5


def test_markdown_neutralises_mentions_and_escapes_unknown_failure_names() -> None:
    assert md("ping @octocat and @org/team") == "ping @\u200doctocat and @\u200dorg/team"
    row = _case_row(CaseRef(case_id="c-1", trial=0, fault="", failures=("schema", "<img src=x>@evil")))
    assert "`schema`" in row and "\\<img src=x\\>@\u200devil" in row and "<img" not in row.replace("\\<img", "")


def figures(**families: tuple[int, int]) -> dict[str, tuple[int, int]]:
    base = {
        f: (9, 10)
        for f in ("selection_precision", "selection_recall", "schema_validity", "argument_accuracy", "recovery")
    }
    base.update({"hallucinated_tools": (0, 10), "hallucination_after_error": (0, 2)})
    base.update(families)
    return base


def run(name: str, trajectories: int, violations: int, **families: tuple[int, int]) -> RunFigures:
    return RunFigures(
        ref=name,
        name=name,
        id=1,
        toolset="t",
        toolset_version="v" * 8,
        toolset_label="",
        suite="s",
        trajectories=trajectories,
        families=figures(**families),
        dependency_violations=violations,
    )


def test_a_family_the_candidate_did_not_measure_fails() -> None:
    result = evaluate_gate(run("b", 10, 0), run("c", 10, 0, recovery=(0, 0)), GateConfig())
    (verdict,) = [v for v in result.families if v.family == "recovery"]
    assert (verdict.status, verdict.detail) == ("regressed", "not measured in candidate (baseline 9/10 (90.0%))")
    assert not result.passed
    # not measured in the baseline either, or only in the baseline: nothing to compare, n/a
    result = evaluate_gate(run("b", 10, 0, recovery=(0, 0)), run("c", 10, 0, recovery=(1, 2)), GateConfig())
    assert [v.status for v in result.families if v.family == "recovery"] == ["n/a"] and result.passed


def test_dependency_violations_compare_as_a_rate_per_checked_trajectory() -> None:
    # 2 violations in 10 trajectories (0.2) -> 4 in 40 (0.1): more violations, fewer per trajectory
    result = evaluate_gate(run("b", 10, 2), run("c", 40, 4), GateConfig())
    (deps,) = [v for v in result.families if v.family == "dependency_violations"]
    assert (deps.status, deps.delta, deps.detail) == (
        "pass",
        pytest.approx(-0.1),
        "2/10 -> 4/40 violations per trajectory: -0.100",
    )
    # 2 in 10 (0.2) -> 3 in 10 (0.3): worse by 0.1, beyond a tolerance of 0.05
    config = parse_gate_config({"tolerance": {"dependency_violations": 0.05}})
    result = evaluate_gate(run("b", 10, 2), run("c", 10, 3), config)
    (deps,) = [v for v in result.families if v.family == "dependency_violations"]
    assert (deps.status, deps.allowed) == ("regressed", "increase <= 0.050 per trajectory")
    assert evaluate_gate(
        run("b", 10, 2), run("c", 10, 3), parse_gate_config({"tolerance": {"dependency_violations": 0.1}})
    ).passed


def test_the_workflow_records_lint_and_gates_with_the_base_branch_config() -> None:
    import yaml

    flow = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs" / "github-actions-gate.yml").read_text())
    steps = flow["jobs"]["gate"]["steps"]
    (lint_step,) = [s for s in steps if "toollens lint" in s.get("run", "")]
    assert lint_step.get("continue-on-error") is True and "lint.json" in lint_step["run"]
    (gate_step,) = [s for s in steps if "toollens gate" in s.get("run", "")]
    assert "--config base/docs/gate.yaml" in gate_step["run"]
    names = [s.get("name") for s in steps]
    assert names.index("Base branch checkout") < names.index("Gate")
    (keep,) = [s for s in steps if s.get("name") == "Keep the evidence"]
    assert "lint.json" in keep["with"]["path"] and keep["if"] == "always()"
