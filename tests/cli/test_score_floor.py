"""``bench/score_floor.py``, the floor ``score_bench.py --real`` divides by: it still runs and
counts what it claims, on a suite and records written here (counts worked out by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOL = {"type": "function", "function": {"name": "get_user", "description": "A user.", "parameters": {
    "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}


def test_the_floor_validates_and_matches_exactly(tmp_path: Path) -> None:
    suite = {"name": "s", "toolset": {"name": "t", "tools": [TOOL]},
             "cases": [{"id": "c1", "question": "q", "expected_calls": [{"name": "get_user",
                                                                        "arguments": {"user_id": "u1"}}]}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    records = [
        # matched and valid (arguments as OpenAI sends them: a JSON string): passes
        {"case_id": "c1", "calls": [{"name": "get_user", "arguments": "{\"user_id\": \"u1\"}"}]},
        # the wrong user (valid, not matched), then an invalid call and a tool the suite lacks
        {"case_id": "c1", "trial": 1, "calls": [{"name": "get_user", "arguments": {"user_id": "u2"}},
                                                {"name": "get_user", "arguments": {"user_id": 7}},
                                                {"name": "delete_user", "arguments": {}}]},
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    out = subprocess.run([sys.executable, "bench/score_floor.py", str(tmp_path / "suite.yaml"),
                          str(tmp_path / "t.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout)
    del counts["validator"]
    assert counts == {"trajectories": 2, "calls": 4, "valid": 2, "unknown_tool": 1, "matched": 1, "expected": 2,
                      "passed": 1}
