"""The floor of scoring: what the least a scorer must do costs, with no ToolLens code.

Reads a suite written by ``toollens convert`` (its tools' JSON Schemas and each case's
expected calls) and a trajectories file, then for every record: parses the line with
orjson, parses each call's arguments (a JSON string as OpenAI sends them), validates
them against the tool's schema with a compiled validator (``jsonschema_rs`` when
installed, else ``fastjsonschema``, else ``jsonschema``'s validator built once per
tool), and matches the calls against the expected ones exactly (name and arguments
equal, in any order). It prints the counts as JSON.

``score_bench.py --real`` times it as a whole process beside ``toollens score``: the
ratio of the two rates (calls per CPU second) is how close ToolLens comes to the floor.
Nothing here is imported from ``app``::

    python bench/score_floor.py SUITE.yaml TRAJECTORIES.jsonl
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

Validate = Callable[[Any], bool]


def _validators() -> tuple[str, Callable[[dict[str, Any]], Validate]]:
    """The fastest compiled validator installed: its name and a factory of ``is_valid``."""
    try:
        import jsonschema_rs

        return "jsonschema_rs", lambda schema: jsonschema_rs.validator_for(schema).is_valid
    except ImportError:
        pass
    try:
        import fastjsonschema

        def compiled(schema: dict[str, Any]) -> Validate:
            check = fastjsonschema.compile(schema)

            def valid(value: Any) -> bool:
                try:
                    check(value)
                except fastjsonschema.JsonSchemaException:
                    return False
                return True

            return valid

        return "fastjsonschema", compiled
    except ImportError:
        pass
    import jsonschema

    return "jsonschema", lambda schema: jsonschema.validators.validator_for(schema)(schema).is_valid


def _tool(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    function = entry.get("function", entry)
    return function["name"], function.get("parameters") or {"type": "object"}


def load_suite(
    path: Path, factory: Callable[[dict[str, Any]], Validate]
) -> tuple[dict[str, Validate], dict[str, list[tuple[str, Any]]]]:
    """Each tool's validator, and each case's expected calls as (name, arguments)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    validators = dict((name, factory(schema)) for name, schema in map(_tool, doc["toolset"]["tools"]))
    expected: dict[str, list[tuple[str, Any]]] = {}
    for case in doc.get("cases") or ():
        steps = list(case.get("expected_calls") or ())
        for turn in case.get("turns") or ():
            steps += turn.get("expected_calls") or ()
        expected[str(case["id"])] = [
            (s["name"], s.get("arguments") or {}) if isinstance(s, dict) else (s, {}) for s in steps
        ]
    return validators, expected


def score(validators: dict[str, Validate], expected: dict[str, list[tuple[str, Any]]], path: Path) -> dict[str, int]:
    counts = {"trajectories": 0, "calls": 0, "valid": 0, "unknown_tool": 0, "matched": 0, "expected": 0, "passed": 0}
    with path.open("rb") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = orjson.loads(line)
            counts["trajectories"] += 1
            made: list[tuple[str, Any]] = []
            valid = 0
            calls = record.get("calls") or ()
            for call in calls:
                name, args = call["name"], call.get("arguments")
                if isinstance(args, str):
                    with contextlib.suppress(orjson.JSONDecodeError):
                        args = orjson.loads(args)
                args = {} if args is None else args
                check = validators.get(name)
                if check is None:
                    counts["unknown_tool"] += 1
                elif check(args):
                    valid += 1
                made.append((name, args))
            want = expected.get(str(record.get("case_id")), [])
            left = list(made)
            matched = 0
            for step in want:
                if step in left:
                    left.remove(step)
                    matched += 1
            counts["calls"] += len(calls)
            counts["valid"] += valid
            counts["matched"] += matched
            counts["expected"] += len(want)
            counts["passed"] += matched == len(want) and valid == len(calls)
    return counts


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    which, factory = _validators()
    validators, expected = load_suite(Path(argv[0]), factory)
    print(json.dumps({"validator": which, **score(validators, expected, Path(argv[1]))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
