"""ToolLens's BFCL verdict (a result file's reward) held to BFCL's own: the
verdicts of bfcl-eval's checker functions (computed in their own process by
``bfcl_reference.py``) on one model's four real result files
(AIREV-Agent-0.8B). Agreement must be at least 99% per category, and every
disagreement is listed in docs/importers.md; there are none today, so the
test names each one that appears."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.importers import Options, convert
from tests.resources import DATA, require_module, shared_data

require_module(
    "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker",
    "pip install --no-deps bfcl-eval==2026.3.23 mpmath (docs/importers.md#bfcl)",
)

BFCL = DATA / "bfcl"
RESULTS = BFCL / "results" / "AIREV-Agent-0.8B"
REFERENCE = Path(__file__).with_name("bfcl_reference.py")
# category -> (items, BFCL's passes), counted by bfcl-eval's checker on these files
EXPECTED = {
    "simple_python": (400, 299),
    "parallel_multiple": (200, 112),
    "irrelevance": (240, 123),
    "multi_turn_base": (200, 3),
}


@functools.cache
def bfcl_verdicts(category: str) -> dict[str, list[object]]:
    answers = BFCL / f"BFCL_v4_{category}.possible_answer.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REFERENCE),
            str(RESULTS / f"BFCL_v4_{category}_result.json"),
            str(BFCL / f"BFCL_v4_{category}.json"),
            str(answers) if answers.is_file() else "",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    verdicts: dict[str, list[object]] = json.loads(done.stdout)
    return verdicts


@pytest.mark.parametrize("category", list(EXPECTED))
@shared_data(*(RESULTS / f"BFCL_v4_{c}_result.json" for c in EXPECTED), BFCL / "multi_turn_func_doc")
def test_toollens_gives_bfcls_verdict(category: str) -> None:
    reference = bfcl_verdicts(category)
    conversion = convert("bfcl", RESULTS / f"BFCL_v4_{category}_result.json", Options(questions=BFCL))
    ours = {t.case_id: t.reward for _, t in conversion.records()}  # type: ignore[union-attr]
    items, passes = EXPECTED[category]
    assert len(reference) == len(ours) == items
    assert sum(1 for valid, _ in reference.values() if valid) == passes
    disagreements = sorted(qid for qid, (valid, _) in reference.items() if ours[qid] != (1.0 if valid else 0.0))
    assert (items - len(disagreements)) / items >= 0.99
    assert disagreements == []  # docs/importers.md explains each one that is accepted
    assert sum(1 for r in ours.values() if r == 1.0) == passes
