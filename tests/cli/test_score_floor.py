"""``bench/score_floor.py``, the floor ``score_bench.py --real`` divides by: it still runs and
counts what it claims, on a suite and records written here (counts worked out by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_user",
        "description": "A user.",
        "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
    },
}


def test_the_floor_validates_and_matches_exactly(tmp_path: Path) -> None:
    suite = {
        "name": "s",
        "toolset": {"name": "t", "tools": [TOOL]},
        "cases": [
            {"id": "c1", "question": "q", "expected_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]}
        ],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    records = [
        # matched and valid (arguments as OpenAI sends them: a JSON string): passes
        {"case_id": "c1", "calls": [{"name": "get_user", "arguments": '{"user_id": "u1"}'}]},
        # the wrong user (valid, not matched), then an invalid call and a tool the suite lacks
        {
            "case_id": "c1",
            "trial": 1,
            "calls": [
                {"name": "get_user", "arguments": {"user_id": "u2"}},
                {"name": "get_user", "arguments": {"user_id": 7}},
                {"name": "delete_user", "arguments": {}},
            ],
        },
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    out = subprocess.run(
        [sys.executable, "bench/score_floor.py", str(tmp_path / "suite.yaml"), str(tmp_path / "t.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout)
    del counts["validator"]
    assert counts == {
        "trajectories": 2,
        "calls": 4,
        "valid": 2,
        "unknown_tool": 1,
        "matched": 1,
        "expected": 2,
        "passed": 1,
    }


def test_score_bench_no_blame_switches_the_blame_off_and_nothing_else(tmp_path: Path) -> None:
    """``score_bench.py --real --no-blame`` runs ``toollens score`` with ``blame_of`` a no-op (Python
    source): a failed conversation is blamed by the plain command and not by that one, the rest alike."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from score_bench import NO_BLAME
    finally:
        sys.path.remove(str(ROOT / "bench"))
    suite = {
        "name": "s",
        "toolset": {"name": "t", "tools": [TOOL]},
        "cases": [
            {"id": "c1", "question": "q", "expected_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]}
        ],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    record = {
        "case_id": "c1",
        "calls": [{"name": "get_user", "arguments": {"user_id": "u2"}}],
        "messages": [
            {"role": "user", "content": "I am u1.", "calls_before": 0},
            {"role": "assistant", "content": "Which user?", "calls_before": 0},
            {"role": "user", "content": "u1, please.", "calls_before": 0},
            {"role": "assistant", "content": "Done.", "calls_before": 1},
        ],
    }
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    env = {"PYTHONPATH": str(ROOT), "TOOLLENS_PURE_PYTHON": "1", "PATH": ""}
    files = [str(tmp_path / "suite.yaml"), str(tmp_path / "t.jsonl"), "--json"]
    plain, off = (
        json.loads(
            subprocess.run(command + files, cwd=ROOT, capture_output=True, text=True, env=env, timeout=60).stdout
        )
        for command in ([sys.executable, "-m", "app.entry", "score"], [sys.executable, "-c", NO_BLAME, "score"])
    )
    assert plain["blame"] == {"agent": 1, "task": 0, "user": 0} and "blame" not in off
    case = plain["cases"][0]
    assert [case.pop(k) for k in ("blame", "blame_confidence")] == ["agent", 0.4]
    assert case.pop("blame_evidence").startswith("no user or task finding")
    del plain["blame"]
    assert plain == off
