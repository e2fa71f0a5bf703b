"""The shipped example suite: every failure family shows in v1; v2 is better.

The figures are pinned so that a change in the scorer shows up here; the
hand-computed ones live in the other test modules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.records import read_jsonl
from app.core.reports.evaluate import score_trajectories
from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite
from tests.factories import call, record

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def figures(version: str) -> dict:  # type: ignore[type-arg]
    suite = load_suite(EXAMPLES / f"suite_{version}.yaml")
    return score_trajectories(suite, read_jsonl(EXAMPLES / f"trajectories_{version}.jsonl")).to_json()


def ratios(data: dict) -> dict[str, tuple[int, int]]:  # type: ignore[type-arg]
    keys = (
        "selection_precision",
        "selection_recall",
        "schema_validity",
        "argument_accuracy",
        "hallucinated_tools",
        "recovery",
        "hallucination_after_error",
    )
    return {k: (data[k]["num"], data[k]["den"]) for k in keys}


def test_v1_shows_every_failure_family() -> None:
    d = figures("v1")
    assert ratios(d) == {
        "selection_precision": (65, 76),
        "selection_recall": (59, 69),
        "schema_validity": (72, 77),
        "argument_accuracy": (58, 60),
        "hallucinated_tools": (2, 79),
        "recovery": (7, 13),
        "hallucination_after_error": (3, 13),
    }
    assert d["outcomes"] == {"recovered": 7, "gave_up": 2, "hallucinated": 3, "confused": 1}
    # every error the agent saw is a recovery case: 6 injected faults, 5 calls the schema refused (four
    # corrected, one followed by "quedó emitida"), 2 calls to cancelar_pedido (one "cancelé tu pedido")
    assert {
        k: (v["recovery"]["num"], v["hallucination_after_error"]["num"], v["recovery"]["den"])
        for k, v in d["recovery_by_source"].items()
    } == {"injected": (2, 1, 6), "tool": (0, 0, 0), "schema": (4, 1, 5), "unknown_tool": (1, 1, 2)}
    assert d["dependency_violations"] == [
        {"before": "verificar_compra", "after": "emitir_nota_credito", "count": 2, "checked": 8}
    ]
    assert set(d["failures"]) == {
        "selection",
        "arguments",
        "schema",
        "hallucinated_tool",
        "dependency",
        "forbidden_call",
        "state",
        "recovery_hallucinated",
        "recovery_confused",
        "step_not_done",
    }
    hot = max((c for c in d["confusion"] if c["expected"] != c["called"]), key=lambda c: c["count"])
    assert (hot["expected"], hot["called"], hot["count"]) == ("buscar_pedido", "buscar_producto", 4)
    # an honest give-up after a fault no longer passes (the step was never done)
    assert d["pass_hat_k"] == {"1": 0.3843, "2": 0.0593, "3": 0.01, "4": 0.0, "5": 0.0, "6": 0.0}


def test_v2_descriptions_reduce_confusions() -> None:
    v1, v2 = figures("v1"), figures("v2")
    assert ratios(v2)["selection_precision"] == (70, 71)
    assert ratios(v2)["hallucinated_tools"] == (0, 71)
    assert v2["pass_hat_k"]["1"] > v1["pass_hat_k"]["1"]
    # recovery after injected faults is error handling, not descriptions: the same in both; v2 meets
    # fewer schema errors (one, corrected) and no unknown tool, so fewer recovery cases of those sources
    assert v2["recovery_by_source"]["injected"] == v1["recovery_by_source"]["injected"]
    assert v2["outcomes"] == {"recovered": 3, "gave_up": 2, "hallucinated": 1, "confused": 1}


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_suites_only_differ_in_descriptions(version: str) -> None:
    v1, other = load_suite(EXAMPLES / "suite_v1.yaml"), load_suite(EXAMPLES / f"suite_{version}.yaml")
    assert [t.name for t in v1.toolset] == [t.name for t in other.toolset]
    assert [t.parameters for t in v1.toolset] == [t.parameters for t in other.toolset]
    assert "cancelar_pedido" not in v1.toolset
    assert len(v1.cases) >= 15


def test_unordered_case_in_the_other_order_passes() -> None:
    suite = load_suite(EXAMPLES / "suite_v1.yaml")
    calls = [
        call("buscar_pedido", {"numero": "PED-20031"}, '{"estado": "pendiente"}'),
        call("buscar_pedido", {"numero": "PED-12345"}, '{"estado": "despachado"}'),
    ]
    ts = Scorer(suite).score(record("pedido-004", calls, "PED-20031 está pendiente y PED-12345 despachado."))
    assert ts.failures == [] and (ts.args_num, ts.args_den) == (2, 2)


def test_the_english_example_suite_is_clean_and_reachable(tmp_path: Path) -> None:
    """examples/shop: no mistake and no lint finding; an agent that makes no mistake passes every
    case (so its expected calls, mocks, data and final state agree), one that makes them does not."""
    import json
    import subprocess
    import sys

    toollens = str(Path(sys.executable).with_name("toollens"))
    suite = str(EXAMPLES / "shop" / "suite.yaml")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([toollens, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)

    linted = run("lint", suite)
    assert linted.returncode == 0 and linted.stdout.startswith("shop v1 ") and "6 tools, 0 findings" in linted.stdout
    no_mistakes = "confusion=0,hallucinated_tool=0,schema_error=0,wrong_value=0,order=0,skip=0"
    assert run("run", suite, "--sim-rates", no_mistakes, "--run", "clean", "--db", "s.db").returncode == 0
    assert run("run", suite, "--trials", "5", "--sweep-errors", "--run", "sloppy", "--db", "s.db").returncode == 0
    clean = json.loads(run("show", "clean", "--db", "s.db", "--json").stdout)
    sloppy = json.loads(run("show", "sloppy", "--db", "s.db", "--json").stdout)
    assert clean["trajectories"] == 8 and clean["pass_hat_k"] == {"1": 1.0}
    assert clean["selection_recall"] == {"num": 12, "den": 12} and clean["argument_accuracy"] == {"num": 12, "den": 12}
    # 8 cases x 5 trials, then one run per expected step with a tool error (12 steps)
    assert sloppy["trajectories"] == 8 * 5 + 12 and sloppy["pass_hat_k"]["1"] < 1.0
    assert sloppy["recovery"]["den"] > 0 and sloppy["outcomes"] != clean["outcomes"]
