"""The scoring path compiled with mypyc (``setup.py``) scores exactly as its Python source.

The rest of the suite runs against whatever the install built (compiled on a
machine with a C compiler, as CI is); here the same files are scored in two
fresh processes, one compiled and one forced back to source with
``TOOLLENS_PURE_PYTHON=1``, and the two ``--json`` reports must be identical.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app import buildinfo
from tests.resources import missing

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Prints which core modules run compiled, then runs `toollens score` with the remaining argv.
PROBE = (
    "import json, sys\n"
    "from app import buildinfo\n"
    "from app.cli import main\n"
    "print(json.dumps(buildinfo.compiled_modules()))\n"
    "main()\n"
)


def _probe(code: str, *args: str, pure: bool) -> tuple[list[str], str]:
    """Run a probe that prints the compiled modules on its first line, in a
    fresh process (compiled, or forced back to source): (those modules, the rest)."""
    env = {k: v for k, v in os.environ.items() if k != "TOOLLENS_PURE_PYTHON"}
    if pure:
        env["TOOLLENS_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    return json.loads(first), rest


def _score(suite: Path, trajectories: Path, *, pure: bool) -> tuple[list[str], str]:
    """(compiled modules, the `--json` report as printed): text, so that 1 and 1.0 differ."""
    return _probe(PROBE, "score", str(suite), str(trajectories), "--json", pure=pure)


def _require_compiled() -> None:
    if buildinfo.compiled_modules():
        return
    missing(
        "the compiled build (this install is pure Python)",
        "`make build` with a C compiler and the Python headers, and without TOOLLENS_PURE_PYTHON",
    )


def test_the_scoring_path_runs_compiled_and_is_fresh() -> None:
    _require_compiled()
    names = {
        "app.core.score.scoring",
        "app.core.suites.schema",
        "app.core.suites.tolerance",
        "app.core.score.alignment",
        "app.core.records",
        "app.core.score.outcome",
        "app.core.reports.report",
        "app.core.score.grounding",
        "app.core.score.divergence",
        "app.core.score.turns",
        "app.core.language",
        "app.core.usage",
        "app.core.score.blame",
        "app.store.rows",
    }
    assert names <= set(buildinfo.compiled_modules())
    assert buildinfo.stale_modules() == []
    assert buildinfo.describe().startswith("scoring: compiled with mypyc")


def _bench_generator() -> Any:
    spec = importlib.util.spec_from_file_location("score_bench", ROOT / "bench" / "score_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_compiled_and_source_score_the_examples_alike(version: str) -> None:
    _require_compiled()
    suite, trajectories = EXAMPLES / f"suite_{version}.yaml", EXAMPLES / f"trajectories_{version}.jsonl"
    compiled_names, compiled = _score(suite, trajectories, pure=False)
    pure_names, pure = _score(suite, trajectories, pure=True)
    assert compiled_names and pure_names == []
    assert compiled == pure
    assert json.loads(compiled)["hallucinated_tools"]["den"] > 0


def test_compiled_and_source_score_every_failure_family_alike(tmp_path: Path) -> None:
    """The benchmark's generator mixes every failure family, fault and outcome into 2,000 trajectories."""
    _require_compiled()
    bench = _bench_generator()
    plans = bench.build_plans(3)
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(bench.build_suite_doc(plans)), encoding="utf-8")
    trajectories = tmp_path / "trajectories.jsonl"
    with trajectories.open("w", encoding="utf-8") as out:
        bench.Generator(bench.parse_suite(bench.build_suite_doc(plans), path="<bench>"), plans, 11).write(out, 11_000)
    _, compiled_text = _score(suite_file, trajectories, pure=False)
    _, pure_text = _score(suite_file, trajectories, pure=True)
    assert compiled_text == pure_text
    compiled = json.loads(compiled_text)
    for family in ("selection_precision", "schema_validity", "argument_accuracy", "recovery"):
        assert 0 < compiled[family]["num"] < compiled[family]["den"], family
    assert compiled["hallucinated_tools"]["num"] > 0


# -- where compiled code could differ from Python: values typed `float` or deep recursion ----------


def test_a_huge_integer_is_checked_against_multiple_of_exactly() -> None:
    from app.core.suites.schema import ArgumentValidator

    validator = ArgumentValidator({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})
    assert validator.validate({"n": 3 * 10**40}) is None
    violation = validator.validate({"n": 10**30})  # a float would call it a multiple of 3
    assert violation is not None and "not a multiple of 3" in violation.message


def test_a_deep_value_against_a_recursive_schema_is_bounded() -> None:
    from app.core.suites.schema import ArgumentValidator

    validator = ArgumentValidator({"type": "object", "properties": {"x": {"$ref": "#"}}})
    value: dict[str, object] = {}
    for _ in range(199):
        value = {"x": value}
    assert validator.validate(value) is None
    for _ in range(100_000):  # far past any C stack: must not crash compiled code
        value = {"x": value}
    violation = validator.validate(value)
    assert violation is not None and "deeper" in violation.message


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"type": "object", "allOf": [{"$ref": "#"}]},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
        # the loop is met only inside a property, after its members were first compiled elsewhere
        {
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/b"}},
            "$defs": {
                "a": {"type": "object", "allOf": [{"$ref": "#/$defs/b"}], "properties": {"q": {"$ref": "#/$defs/b"}}},
                "b": {"oneOf": [{"$ref": "#/$defs/a"}]},
            },
        },
    ],
)
def test_a_ref_loop_that_never_enters_the_value_is_refused_when_loaded(schema: dict[str, Any]) -> None:
    """Checking such a schema would never end: Python stops at its recursion limit, compiled code
    would overflow the C stack and kill the process. Refused at load, in both builds."""
    from app.core.errors import ToolSpecError
    from app.core.suites.schema import ArgumentValidator

    with pytest.raises(ToolSpecError, match="leads back to itself"):
        ArgumentValidator(schema)


def test_recursive_schemas_that_go_into_the_value_still_load() -> None:
    from app.core.suites.schema import ArgumentValidator

    tree = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        "allOf": [{"$ref": "#/$defs/named"}],
        "$defs": {"named": {"required": ["name"]}},
    }
    validator = ArgumentValidator(tree)
    assert validator.validate({"name": "a", "children": [{"name": "b", "children": []}]}) is None
    violation = validator.validate({"name": "a", "children": [{"children": []}]})
    assert violation is not None and "name" in violation.message


# -- the OTLP receiver's span decoding (otlp.spans, otlp.wire), compiled as well ---------------------------

OTEL_PROBE = (
    "import json, sys\n"
    "from app import buildinfo\n"
    "from app.importers import otel\n"
    "from app.otlp import spans\n"
    "body = open(sys.argv[1], 'rb').read()\n"
    "refs = spans.span_refs_from_protobuf(body)\n"
    "(read,) = spans.spans_of({7: (spans.BATCH_PROTOBUF, body)}, [[(7, r.index) for r in refs]])\n"
    "assert read == spans.spans_from_json(json.load(open(sys.argv[2])))  # the same request as OTLP/JSON\n"
    "print(json.dumps(buildinfo.compiled_modules()))\n"
    "print(json.dumps([otel.trajectory_record(v, []) for v in otel.group_by_trace(read).values()]))\n"
)


def test_compiled_and_source_read_otlp_spans_alike(tmp_path: Path) -> None:
    """The tau-bench sample replayed as GenAI spans (an OTLP protobuf request, and the same request as
    OTLP/JSON): the staged spans decode to the same spans in both builds, and give the same records."""
    _require_compiled()
    from google.protobuf.json_format import MessageToDict

    from tests.otlp.test_otlp_worker import tau_request

    request = tau_request()
    (tmp_path / "request.pb").write_bytes(request.SerializeToString())
    (tmp_path / "request.json").write_text(json.dumps(MessageToDict(request)))
    files = str(tmp_path / "request.pb"), str(tmp_path / "request.json")
    compiled_names, compiled = _probe(OTEL_PROBE, *files, pure=False)
    pure_names, pure = _probe(OTEL_PROBE, *files, pure=True)
    assert {"app.importers.otel", "app.otlp.spans", "app.otlp.wire"} <= set(compiled_names) and pure_names == []
    assert compiled == pure
    records = json.loads(compiled)
    assert len(records) == 100 and sum(len(r["calls"]) for r in records) == 621
