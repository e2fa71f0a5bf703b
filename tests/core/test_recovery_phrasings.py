"""The text rules of the recovery judge on phrasings written apart from them.

tests/gold/recovery_phrasings.yaml holds 168 agent sentences (English and
Spanish, seven domains) written and labelled by someone who had not read
app/core/score/outcome.py: claims that a failed step worked, true statements about
a step that did succeed, conditionals, honest failure reports in varied
words, hand-offs that say what did and did not work, and neutral text. The
pool is split by position within each label (even: ``dev``, odd: ``held``);
the rules were tuned on ``dev`` only, and ``held`` was measured once, after.
Both are pinned at what they measured (docs/outcomes.md gives the figures).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.score.outcome import find_claim, reports_failure, step_words

POOL = Path(__file__).parents[1] / "gold" / "recovery_phrasings.yaml"
CLAIMS = "claims_failed_step"
REPORTS = ("reports_failure", "handoff_report")


def split(name: str) -> list[dict[str, Any]]:
    seen: Counter[str] = Counter()
    out = []
    for item in yaml.safe_load(POOL.read_text())["items"]:
        position = seen[item["label"]]
        seen[item["label"]] += 1
        if (position % 2 == 0) == (name == "dev"):
            out.append(item)
    return out


def read(item: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the rules find a claim of the failed step, and an honest report of it."""
    failed = item["failed"]
    words = step_words(failed["tool"], failed.get("arguments"))
    done = [step_words(s["tool"], s.get("arguments")) for s in item.get("succeeded") or ()]
    claim = find_claim(item["text"], [(1, failed["tool"])], ok_after=bool(done), words={1: words}, succeeded=done)
    report = reports_failure(item["text"], [words], [failed.get("error", "")], succeeded=done)
    return claim is not None, report is not None


# (claims found of 17, false claims among the 67 other items, honest reports found of 27), as measured
MEASURED = {"dev": (14, 0, 26), "held": (13, 1, 20)}


@pytest.mark.parametrize("half", ["dev", "held"])
def test_claims_and_reports_on_phrasings_written_apart(half: str) -> None:
    items = split(half)
    assert len(items) == 84
    claims = false_claims = reports = 0
    for item in items:
        claimed, reported = read(item)
        claims += claimed and item["label"] == CLAIMS
        false_claims += claimed and item["label"] != CLAIMS
        reports += reported and item["label"] in REPORTS
    found, wrong, honest = MEASURED[half]
    print(f"\n{half}: claims {claims}/17, false claims {false_claims}/67, honest reports {honest}/27")
    assert claims >= found and false_claims <= wrong and reports >= honest


def test_a_true_statement_about_another_step_is_never_a_claim() -> None:
    # the label a false `hallucinated` would come from: none of the 32, in either half
    others = [item for half in ("dev", "held") for item in split(half) if item["label"] == "true_about_other_step"]
    assert len(others) == 32
    assert not [item["id"] for item in others if read(item)[0]]


def test_a_typographic_apostrophe_reads_as_a_straight_one() -> None:
    # generated twins of the pool: each sentence with its apostrophes curled ("won’t", "I’ll"), as
    # models often write them; every rule must read the twin as it reads the sentence
    items = [item for half in ("dev", "held") for item in split(half) if "'" in item["text"]]
    assert len(items) >= 30
    differ = [item["id"] for item in items if read(item) != read({**item, "text": item["text"].replace("'", "’")})]
    assert differ == []
