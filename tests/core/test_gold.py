"""The deterministic classifier against hand-labelled real runs (tests/gold/).

Every tau-bench airline run with a tool error was read one by one and its
outcome and its reaction to each error labelled by hand. The classifier must
never call a run ``hallucinated`` that people did not (that verdict blocks a
release: precision 1.0), and must agree on 90% of outcomes and reactions.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite
from app.importers import Options, convert
from tests.resources import DATA, shared_data

GOLD = Path(__file__).parents[1] / "gold"
TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
TOOLS = DATA / "tau_bench_tool_schemas_airline_retail.json"


def _call_index_of_messages(traj: list[dict[str, Any]]) -> dict[int, int]:
    """The call index of each tool-result message of a raw tau-bench run."""
    by_id: dict[str, int] = {}
    n = 0
    out: dict[int, int] = {}
    for i, m in enumerate(traj):
        for tc in m.get("tool_calls") or ():
            by_id[tc["id"]] = n
            n += 1
        if m["role"] == "tool":
            out[i] = by_id[m["tool_call_id"]]
    return out


def _agreement(pairs: list[tuple[str, str]]) -> tuple[float, dict[str, str]]:
    by_class: dict[str, str] = {}
    for label in sorted({g for g, _ in pairs}):
        mine = [(g, c) for g, c in pairs if g == label]
        by_class[label] = f"{sum(g == c for g, c in mine)}/{len(mine)}"
    return sum(g == c for g, c in pairs) / len(pairs), by_class


@shared_data(TAU, TOOLS)
def test_tau_bench_verdicts_agree_with_the_hand_labels() -> None:
    gold = yaml.safe_load((GOLD / "tau_bench_airline.yaml").read_text())
    conversion = convert("tau-bench", TAU, Options(tools=TOOLS))
    scorer = Scorer(parse_suite(conversion.suite))
    scored = {}
    for _, traj in conversion.records():
        assert not isinstance(traj, Exception), traj
        scored[(traj.case_id, traj.trial)] = scorer.score(traj)
    raw = {(r["task_id"], r["trial"]): r for r in json.loads(TAU.read_text())}
    faulted = {key for key, ts in scored.items() if ts.fault_step is not None}
    labelled = {(f"task-{r['task']}", r["trial"]) for r in gold["runs"]}
    assert faulted == labelled, "every run with a tool error is labelled, and only those"

    outcomes: list[tuple[str, str]] = []
    reactions: list[tuple[str, str]] = []
    wrong_hallucinated = []
    for run in gold["runs"]:
        ts = scored[(f"task-{run['task']}", run["trial"])]
        assert ts.outcome is not None
        outcomes.append((run["outcome"], ts.outcome.outcome))
        if ts.outcome.outcome == "hallucinated" and run["outcome"] != "hallucinated":
            wrong_hallucinated.append((run["task"], run["trial"], ts.outcome.evidence))
        index = _call_index_of_messages(raw[(run["task"], run["trial"])]["traj"])
        for err in run["errors"]:
            call = ts.calls[index[err["message"]]]
            assert call.reaction is not None, (run["task"], run["trial"], err["message"])
            reactions.append((err["reaction"], call.reaction.reaction))
    out_rate, out_classes = _agreement(outcomes)
    react_rate, react_classes = _agreement(reactions)
    print(f"\noutcomes: {out_rate:.3f} agreement over {len(outcomes)} runs, by label {out_classes}")
    print(f"reactions: {react_rate:.3f} agreement over {len(reactions)} errors, by label {react_classes}")
    print("confusions:", Counter((g, c) for g, c in outcomes + reactions if g != c))
    assert not wrong_hallucinated, f"hallucinated verdicts people did not give: {wrong_hallucinated}"
    assert out_rate >= 0.9 and react_rate >= 0.9


TOOLBENCH = DATA / "toolbench"


@shared_data(TOOLBENCH)
def test_toolbench_verdicts_agree_with_the_hand_labels() -> None:
    gold = yaml.safe_load((GOLD / "toolbench.yaml").read_text())["runs"]
    conversion = convert("toolbench", TOOLBENCH, Options())
    scorer = Scorer(parse_suite(conversion.suite))
    scored = {}
    for _, traj in conversion.records():
        assert not isinstance(traj, Exception), traj
        scored[traj.case_id] = scorer.score(traj)
    outcomes: list[tuple[str, str]] = []
    reactions: list[tuple[str, str]] = []
    for run in gold.values():
        ts = scored[run["case_id"]]
        if run["errors"]:
            assert ts.outcome is not None, run["case_id"]
            outcomes.append((run["outcome"], ts.outcome.outcome))
            assert not (ts.outcome.outcome == "hallucinated" and run["outcome"] != "hallucinated")
        else:
            assert ts.outcome is None, run["case_id"]
        for err in run["errors"]:
            reaction = ts.calls[err["call"]].reaction
            assert reaction is not None, (run["case_id"], err["call"])
            reactions.append((err["reaction"], reaction.reaction))
    out_rate, out_classes = _agreement(outcomes)
    react_rate, react_classes = _agreement(reactions)
    print(
        f"\nToolBench outcomes: {out_rate:.3f} over {len(outcomes)} runs {out_classes}; "
        f"reactions: {react_rate:.3f} over {len(reactions)} errors {react_classes}"
    )
    assert out_rate >= 0.9 and react_rate >= 0.9
