"""One Scorer serves concurrent requests: scoring in threads gives what
scoring in one thread gives."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.core.records import read_jsonl
from app.core.reports.report import Report
from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_scoring_in_threads_matches_scoring_alone() -> None:
    suite = load_suite(EXAMPLES / "suite_v1.yaml")
    trajs = list(read_jsonl(EXAMPLES / "trajectories_v1.jsonl")) * 40
    alone = Report(keep_cases=False)
    for t in trajs:
        alone.add(Scorer(suite).score(t))
    shared = Scorer(suite)
    with ThreadPoolExecutor(max_workers=8) as pool:
        scores = list(pool.map(shared.score, trajs))
    together = Report(keep_cases=False)
    for s in scores:
        together.add(s)
    assert together.to_json() == alone.to_json()
