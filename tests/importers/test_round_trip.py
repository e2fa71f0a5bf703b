"""What ToolLens writes, ToolLens reads: every registered importer's output is accepted by
``toollens lint``, ``score`` and ``import`` with no flag (no ``--lenient``), on every real file
of the shared data, on the tests' own samples and on variants generated from them.

``SAMPLES`` names each format's samples, one test each; a format registered
(``app.importers.FORMATS``) without a sample fails ``test_every_registered_importer_has_samples``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.importers import FORMATS
from tests.importers.test_import_converters import LEGACY, OPENAI_CONVERSATION, T1, T2, TOOLS, attr, export, span
from tests.resources import DATA, DATA_HOW, missing, shared_data

runner = CliRunner()


def otel_traces(path: Path) -> Path:
    """Two traces without a reference: one with a tool error the agent never got past, one clean."""
    path.parent.mkdir(parents=True, exist_ok=True)
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Lima?"}]}])
    line1 = export(
        span(
            T1,
            "b2",
            "a1",
            "execute_tool get_weather",
            300,
            [
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", "get_weather"),
                attr("gen_ai.tool.call.arguments", '{"city": "Lima"}'),
                attr("gen_ai.tool.call.result", "18 C"),
            ],
        ),
        span(
            T1,
            "b1",
            "a1",
            "execute_tool get_weather",
            100,
            [
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", "get_weather"),
                attr("gen_ai.tool.call.arguments", '{"city": 7}'),
            ],
            error="city must be a string",
        ),
        span(
            T2,
            "d1",
            "",
            "agent",
            50,
            [
                attr("openinference.span.kind", "AGENT"),
                attr("input.value", "Hi"),
                attr("output.value", "Bye"),
                attr("session.id", "s-9"),
            ],
        ),
        span(
            T2,
            "d2",
            "d1",
            "lookup",
            60,
            [
                attr("openinference.span.kind", "TOOL"),
                attr("tool.name", "lookup"),
                attr("input.value", '{"q": "x"}'),
                attr("output.value", "found"),
            ],
        ),
    )
    line2 = export(
        span(
            T1,
            "c1",
            "a1",
            "chat",
            50,
            [
                attr("gen_ai.operation.name", "chat"),
                attr("gen_ai.input.messages", user),
                attr("gen_ai.response.model", "gpt-4o"),
                attr("gen_ai.usage.input_tokens", 1000),
                attr("gen_ai.usage.output_tokens", 100),
            ],
        ),
        span(T1, "a1", "", "invoke_agent", 10, [attr("gen_ai.operation.name", "invoke_agent")]),
    )
    path.write_text(json.dumps(line1) + "\n" + json.dumps(line2) + "\n", encoding="utf-8")
    return path


def invoke(*args: Any) -> Any:
    return runner.invoke(cli, [str(a) for a in args])


def test_traces_without_a_reference_score_what_needs_none(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = invoke("convert", "--from", "otel", otel_traces(tmp_path / "traces.jsonl"), "--out", out)
    assert r.exit_code == 0, r.output
    assert "(0 cases)" in r.stderr
    r = invoke("score", out / "suite.yaml", out / "trajectories.jsonl", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["trajectories"] == 2 and data["with_reference"] == 0
    # what needs a reference says so; the rest is counted: 3 calls, all valid, none hallucinated,
    # one tool error (trace 1's first call) after which the agent neither recovered nor said so
    for key in ("selection_precision", "selection_recall", "argument_accuracy"):
        assert data[key] == {"num": 0, "den": 0, "no_reference": True}
    assert data["schema_validity"] == {"num": 3, "den": 3}
    assert data["hallucinated_tools"] == {"num": 0, "den": 3}
    assert data["recovery"] == {"num": 0, "den": 1} and data["outcomes"]["confused"] == 1
    # cost and latency need no reference: 1000 input and 100 output tokens of gpt-4o at 2.50 and 10.00 USD
    # per million; every span lasts 5 ns
    assert data["usage"]["cost_usd"] == 0.0035 and data["usage"]["input_tokens"] == 1000
    assert data["usage"]["tool_latency_ms"]["p50"] == 0.0 and data["usage"]["model_calls"] == 1
    assert [c["case_id"] for c in data["cases"]] == [T1, "s-9"]
    text = invoke("score", out / "suite.yaml", out / "trajectories.jsonl")
    assert text.exit_code == 0 and text.stdout.count("no reference") == 3


MULTI_TURN = DATA / "bfcl" / "BFCL_v4_multi_turn_base.json"


@shared_data(MULTI_TURN, MULTI_TURN.with_suffix(".possible_answer.json"))
def test_score_a_folder_scores_every_suite_with_its_trajectories(tmp_path: Path) -> None:
    from tests.importers.test_bfcl_multi_turn import converted, played_back

    out = tmp_path / "mt"
    r = invoke("convert", "--from", "bfcl", MULTI_TURN, "--out", out)
    assert r.exit_code == 0, r.output
    assert len(list(out.glob("suite*.yaml"))) == 32
    # the ground truth of all 200 questions, played back as the agent, one file for the 32 suites
    _, suites = converted()
    lines = [json.dumps(played_back(c).to_dict()) for s in suites for c in s.cases]
    (out / "trajectories.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = invoke("score", out, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["trajectories"] == len(data["cases"]) == 200
    assert [c["case_id"] for c in data["cases"] if not c["passed"]] == ["multi_turn_base_173"]  # its marked value
    assert len(data["suites"]) == 32 and sum(s["trajectories"] for s in data["suites"]) == 200
    assert data["suites"][0] == {"file": "suite.yaml", "name": "BFCL_v4_multi_turn_base", "cases": 2, "trajectories": 2}
    assert [s["file"] for s in data["suites"][:3]] == ["suite.yaml", "suite-2.yaml", "suite-3.yaml"]
    assert data["selection_recall"]["num"] == data["selection_recall"]["den"] == 1142
    text = invoke("score", out)
    assert text.exit_code == 0 and "mt: 32 suites" in text.stdout and "200 trajectories" in text.stdout
    # a record of a case no suite holds is named, as with one suite
    (out / "trajectories.jsonl").write_text(lines[0] + "\n" + lines[0].replace("multi_turn_base_", "other_") + "\n")
    r = invoke("score", out)
    assert r.exit_code == 2 and "1 of 2 records are of cases the suite lacks" in r.stderr


def test_score_a_folder_refuses_what_is_not_one(tmp_path: Path) -> None:
    r = invoke("score", tmp_path)
    assert r.exit_code == 2 and "no suite.yaml in this folder" in r.stderr
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\ntoolset: {name: t, tools: [{name: a, description: A., parameters: {type: object}}]}\n"
        "cases: [{id: c1, question: q}]\n"
    )
    r = invoke("score", suite)
    assert r.exit_code == 2 and "give the trajectories file too" in r.stderr
    (tmp_path / "suite-2.yaml").write_text(suite.read_text())
    (tmp_path / "trajectories.jsonl").write_text("")
    r = invoke("score", tmp_path)
    assert r.exit_code == 2 and "case 'c1' is in both suite.yaml and suite-2.yaml" in r.stderr


# -- every registered importer -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
Made = tuple[Path, list[str]]  # the source and the options given to convert and import
Build = Callable[[Path], Made | None]  # None: the sample needs what this machine lacks (shared data, a package)


def real(relative: str, *options: str) -> Build:
    """A file (or folder) of the shared data; ``options`` may name other shared files as ``DATA/…``."""

    def build(_: Path) -> Made | None:
        source = DATA / relative
        given = [str(DATA / o[5:]) if o.startswith("DATA/") else o for o in options]
        if not source.exists() or any(o.startswith("DATA/") and not (DATA / o[5:]).exists() for o in options):
            return None
        return source, given

    return build


def written(name: str, text: Callable[[], str], *options: str) -> Build:
    def build(folder: Path) -> Made:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(text(), encoding="utf-8")
        return path, list(options)

    return build


def lines(*rows: Any) -> Callable[[], str]:
    return lambda: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def tools_file(folder: Path) -> str:
    path = folder / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    return str(path)


def with_tools(build: Build) -> Build:
    def inner(folder: Path) -> Made | None:
        made = build(folder)
        return None if made is None else (made[0], [*made[1], "--tools", tools_file(folder)])

    return inner


ANTHROPIC = {
    "id": "a1",
    "messages": [
        {"role": "user", "content": "Weather in Lima?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Lima"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "upstream timeout"}],
                }
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": 7}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "18 C"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "18 C in Lima."}]},
    ],
}


def tau_bench_run(task_id: int, trial: int, reward: float, actions: list[dict[str, Any]]) -> dict[str, Any]:
    """A tau-bench run of our own: the task's actions, and a conversation whose one call looks the user up."""
    return {
        "task_id": task_id,
        "trial": trial,
        "reward": reward,
        "info": {"task": {"instruction": "Cancel my trip.", "actions": actions}},
        "traj": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "Cancel my trip."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "get_user_details", "arguments": '{"user_id": "u1"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": '{"name": "U"}'},
            {"role": "assistant", "content": "Done."},
        ],
    }


TAU_OWN = [
    tau_bench_run(0, 0, 1.0, [{"name": "get_user_details", "kwargs": {"user_id": "u1"}}]),
    tau_bench_run(0, 1, 0.0, [{"name": "get_user_details", "kwargs": {"user_id": "u1"}}]),
    # an action on a tool no run called
    tau_bench_run(1, 0, 0.0, [{"name": "cancel_reservation", "kwargs": {"reservation_id": "R1"}}]),
]


def tau_bench_subset(folder: Path) -> Made | None:
    """Generated: the first 9 runs of the real file as JSON Lines, with the real schemas."""
    made = real(
        "tau_bench_gpt-4o_airline_tasks00-24.json", "--tools", "DATA/tau_bench_tool_schemas_airline_retail.json"
    )(folder)
    if made is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in json.loads(made[0].read_text())[:9]), encoding="utf-8")
    return path, made[1]


def otel_grouped(folder: Path) -> Made:
    from tests.importers.test_otel_llm_spans import export_request, openinference_attributes

    per_call = [
        (f"{t:032x}", f"{t:016x}", {**openinference_attributes(t), "session.id": "conv-1"}) for t in range(1, 5)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grouped.jsonl"
    path.write_text("\n".join(json.dumps(export_request([c], {}, 10 * i)) for i, c in enumerate(per_call)) + "\n")
    return path, ["--group-by", "session.id"]


def bfcl_single_turn(folder: Path) -> Made:
    """Generated: possible answers that break their own schema each way (a variable's name for an
    array, a value outside the enum, a required argument that may be omitted), and one that does not."""
    schema = {
        "type": "dict",
        "properties": {
            "x": {"type": "array", "items": {"type": "float"}},
            "unit": {"type": "string", "enum": ["meter", "feet"]},
            "n": {"type": "integer"},
        },
        "required": ["x", "n"],
    }
    fn = [{"name": "fit", "description": "Fit a line.", "parameters": schema}]
    question = [[{"role": "user", "content": "Fit it."}]]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "BFCL_v4_simple_tiny.json"
    path.write_text(lines(*({"id": f"simple_tiny_{i}", "question": question, "function": fn} for i in range(2)))())
    (folder / "BFCL_v4_simple_tiny.possible_answer.json").write_text(
        lines(
            {
                "id": "simple_tiny_0",
                "ground_truth": [{"fit": {"x": ["data['x']"], "unit": ["ft", "feet"], "n": ["", 3]}}],
            },
            {"id": "simple_tiny_1", "ground_truth": [{"fit": {"x": [[1.0, 2.0]], "unit": ["meter"], "n": [3]}}]},
        )()
    )
    return path, []


def bfcl_multi_turn(folder: Path) -> Made:
    """Generated: a multi-turn question whose second turn passes a string for a float."""
    from tests.importers.test_bfcl_multi_turn import _tiny

    folder.mkdir(parents=True, exist_ok=True)
    return _tiny(folder, [["add(a=1.0, b=2.0)"], ["sqrt(number='four')"], []]), []


def toolbench_lines(folder: Path) -> Made:
    from tests.importers.test_toolbench import run

    messages = [
        {"role": "system", "content": "You are AutoGPT"},
        {"role": "user", "content": "Find x"},
        {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"q": 1}'}},
        {"role": "function", "name": "lookup", "content": json.dumps({"error": "", "response": "x is 4"})},
        {
            "role": "assistant",
            "content": None,
            "function_call": {
                "name": "Finish",
                "arguments": json.dumps({"return_type": "give_answer", "final_answer": "4"}),
            },
        },
    ]
    return written("answers.jsonl", lines(run(messages, win=True), run(messages[:3])))(folder)


def tau2_own(**changes: Any) -> Build:
    def build(folder: Path) -> Made:
        from tests.importers.test_tau2 import results_file

        folder.mkdir(parents=True, exist_ok=True)
        return results_file(folder, **changes), []

    return build


def tau2_graded_elsewhere() -> Build:
    """Generated: τ²'s own sample where one simulation was graded on another task's actions."""
    from tests.importers.test_tau2 import SIM_A, SIM_B, SIM_C, TASKS

    graded = [{"action": a} for a in TASKS[0]["evaluation_criteria"]["actions"]]
    return tau2_own(simulations=[SIM_A, SIM_B, {**SIM_C, "reward_info": {"reward": 0.0, "action_checks": graded}}])


def tau2_declared_tools(folder: Path) -> Made | None:
    """Generated: the real retail run with tau-bench's retail schemas as the file's own
    ``info.environment_info.tool_defs`` (real files often hold null there)."""
    retail = DATA / "tau2" / "toolorchestra_retail_gpt-4.1-mini.json"
    schemas = DATA / "tau_bench_tool_schemas_airline_retail.json"
    if not retail.exists() or not schemas.exists():
        return None
    doc = json.loads(retail.read_text(encoding="utf-8"))
    env = {**(doc["info"].get("environment_info") or {}), "tool_defs": json.loads(schemas.read_text())["retail"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "retail.json"
    path.write_text(json.dumps({**doc, "info": {**doc["info"], "environment_info": env}}), encoding="utf-8")
    return path, []


def inspect_generated(log_format: str) -> Build:
    def build(folder: Path) -> Made | None:
        try:
            from tests.inspect_mock import make_log
        except ImportError:  # inspect_ai is a dev dependency
            return None
        folder.mkdir(parents=True, exist_ok=True)
        return make_log(folder, log_format), []

    return build


SAMPLES: dict[str, list[tuple[str, Build]]] = {
    "toollens": [
        ("example-v1", lambda _: (ROOT / "examples" / "trajectories_v1.jsonl", [])),
        ("example-v2", lambda _: (ROOT / "examples" / "trajectories_v2.jsonl", [])),
    ],
    "openai-messages": [
        ("conversation-and-legacy", written("chat.jsonl", lines(OPENAI_CONVERSATION, LEGACY))),
        ("array-with-tools", with_tools(written("chat.json", lambda: json.dumps([OPENAI_CONVERSATION, LEGACY])))),
        ("bare-message-list", written("one.jsonl", lines(OPENAI_CONVERSATION["messages"]))),
    ],
    "anthropic-messages": [
        ("conversation", written("a.jsonl", lines(ANTHROPIC))),
        ("with-tools", with_tools(written("a.jsonl", lines(ANTHROPIC)))),
    ],
    "tau-bench": [
        (
            "real-with-schemas",
            real(
                "tau_bench_gpt-4o_airline_tasks00-24.json", "--tools", "DATA/tau_bench_tool_schemas_airline_retail.json"
            ),
        ),
        ("real-inferred", real("tau_bench_gpt-4o_airline_tasks00-24.json")),
        ("subset-as-lines", tau_bench_subset),
        ("own", written("runs.json", lambda: json.dumps(TAU_OWN))),
    ],
    "otel": [
        ("traces", lambda folder: (otel_traces(folder / "traces.jsonl"), [])),
        ("grouped-by-session", otel_grouped),
    ],
    "bfcl": [
        ("real-simple", real("bfcl/BFCL_v4_simple_python.json")),
        ("real-parallel-multiple", real("bfcl/BFCL_v4_parallel_multiple.json")),
        ("real-irrelevance", real("bfcl/BFCL_v4_irrelevance.json")),
        ("real-multi-turn", real("bfcl/BFCL_v4_multi_turn_base.json")),
        *(
            (
                f"real-results-{c}",
                real(f"bfcl/results/AIREV-Agent-0.8B/BFCL_v4_{c}_result.json", "--questions", "DATA/bfcl"),
            )
            for c in ("simple_python", "parallel_multiple", "irrelevance", "multi_turn_base")
        ),
        ("generated-single-turn", bfcl_single_turn),
        ("generated-multi-turn", bfcl_multi_turn),
    ],
    "toolbench": [
        ("real-folder", real("toolbench")),
        ("real-one-file", real("toolbench/G1_answer_69_ChatGPT_DFS_woFilter_w2.json")),
        ("generated-lines", toolbench_lines),
    ],
    "tau2": [
        ("real-telecom", real("tau2/gpt-4o_telecom_pr17.json")),
        ("real-airline", real("tau2/claude-sonnet-4-6_airline_ironforge.json")),
        ("real-retail", real("tau2/toolorchestra_retail_gpt-4.1-mini.json")),
        (
            "real-retail-with-schemas",
            real(
                "tau2/toolorchestra_retail_gpt-4.1-mini.json",
                "--tools",
                "DATA/tau_bench_tool_schemas_airline_retail.json",
            ),
        ),
        ("retail-declared-tool-defs", tau2_declared_tools),
        ("own", tau2_own()),
        ("graded-on-another-task", tau2_graded_elsewhere()),
    ],
    "inspect": [
        ("real-json", real("inspect/inspect_ai_browser_gpt-4o-mini.json")),
        ("real-eval", real("inspect/inspect-action_oxdna_claude-opus-4-1.eval")),
        ("generated-eval", inspect_generated("eval")),
        ("generated-json", inspect_generated("json")),
    ],
}


def played_back(case: dict[str, Any]) -> dict[str, Any]:
    """A case's reference as the agent's trajectory (each turn's calls after its user message)."""
    calls: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for turn in case.get("turns") or [{"user": case.get("question", ""), "expected_calls": case.get("expected_calls")}]:
        messages.append({"role": "user", "content": turn["user"], "calls_before": len(calls)})
        calls += [
            {
                "name": e["name"] if isinstance(e, dict) else e,
                "observation": "{}",
                "arguments": e.get("arguments", {}) if isinstance(e, dict) else {},
            }
            for e in turn.get("expected_calls") or []
        ]
    return {
        "case_id": case["id"],
        "question": messages[0]["content"] or case["id"],
        "calls": calls,
        "messages": messages,
        "answer": "done",
    }


def ok(result: Any, what: str) -> Any:
    assert result.exit_code == 0, f"{what}: exit {result.exit_code}\n{result.output}"
    assert "error: " not in result.stderr and "warning: " not in result.stderr, f"{what}: {result.stderr}"
    return result


def round_trip(fmt: str, source: Path, options: list[str], folder: Path) -> None:
    out = folder / "out"
    ok(invoke("convert", "--from", fmt, source, "--out", out, *options), f"convert {source.name}")
    suites = sorted(out.glob("suite*.yaml"))
    for suite in suites:  # findings (exit 1) are the linter's job; a mistake in the suite (exit 2) is not
        r = invoke("lint", suite)
        assert r.exit_code in (0, 1) and "error: " not in r.stderr and "warning: " not in r.stderr, r.output
    trajectories = out / "trajectories.jsonl"
    records = [line for line in trajectories.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:  # a source of questions only: its reference, played back as the agent, is scored
        cases = [c for s in suites for c in yaml.safe_load(s.read_text(encoding="utf-8"))["cases"]]
        records = [json.dumps(played_back(c), ensure_ascii=False) for c in cases]
        trajectories.write_text("\n".join(records) + "\n", encoding="utf-8")
    data = json.loads(ok(invoke("score", out, "--json"), f"score {out}").stdout)
    assert data["trajectories"] == len(data["cases"]) == len(records)
    if len(suites) == 1:
        assert (
            json.loads(ok(invoke("score", suites[0], trajectories, "--json"), "score").stdout)["cases"] == data["cases"]
        )
    db = f"sqlite:///{folder / 'store.db'}"
    first = yaml.safe_load(suites[0].read_text(encoding="utf-8"))
    own = {c["id"] for c in first["cases"]}
    mine = [r for r in records if not own or json.loads(r)["case_id"] in own]
    (folder / "first.jsonl").write_text("".join(r + "\n" for r in mine), encoding="utf-8")
    r = ok(invoke("import", folder / "first.jsonl", "--suite", suites[0], "--run", "converted", "--db", db), "import")
    assert f"stored {len(mine)} trajectories" in r.stderr
    if FORMATS[fmt].runs:
        r = ok(invoke("import", source, "--format", fmt, *options, "--run", "direct", "--db", db), "import --format")
        assert f"stored {len(records)} trajectories" in r.stderr


ALSO_SAMPLED = {
    "real-with-schemas",
    "real-retail-with-schemas",
    "retail-declared-tool-defs",
    "array-with-tools",
    "with-tools",
}
SLICES = {"first-3": slice(0, 3), "every-3rd": slice(1, None, 3)}


def variants(fmt: str, source: Path, options: list[str], folder: Path) -> list[tuple[str, Made]]:
    """Generated from a sample: a part of its records (the first three, every third from the
    second), written in the sample's own format, so a reference, a toolset or a join that holds
    only over the whole file shows up (a tau-bench file's first three runs named tools none of
    them called); and every record twice (the store keeps one trajectory per case and trial)."""
    if source.is_dir() or fmt in ("inspect", "otel"):  # an archive; a trace's spans span export requests
        return []
    text = source.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.strip()]
    doc: Any = None
    if fmt == "tau2":
        doc = json.loads(text)
        rows = doc["simulations"]
    elif text.lstrip().startswith("[") and fmt != "openai-messages":
        rows = json.loads(text)
    elif not all(row.lstrip().startswith("{") and row.rstrip().endswith("}") for row in rows):
        return []  # one pretty-printed object (a ToolBench answer file): nothing to part
    out = []
    parts: list[tuple[str, list[Any]]] = [
        (label, rows[part]) for label, part in SLICES.items() if fmt != "bfcl" or label != "every-3rd"
    ]  # its lint is the slow part
    if FORMATS[fmt].runs and fmt != "toollens":  # every run twice, ids and trials alike (ToolLens's own
        # records are taken as they are: a repeat there is the import's to name)
        parts.append(("twice", rows + rows))
    for label, kept in parts:
        if not kept or len(kept) == len(rows):
            continue
        where = folder / f"{label}"
        where.mkdir(parents=True, exist_ok=True)
        target = where / source.name
        if doc is not None:
            target.write_text(json.dumps({**doc, "simulations": kept}), encoding="utf-8")
        elif isinstance(kept[0], str):
            target.write_text("".join(r + "\n" for r in kept), encoding="utf-8")
        else:
            target.write_text(json.dumps(kept), encoding="utf-8")
        if fmt == "bfcl":  # the possible answers and the multi-turn tool docs beside it
            for beside in (
                source.with_name(f"{source.stem}.possible_answer{source.suffix}"),
                source.parent / "multi_turn_func_doc",
            ):
                if beside.is_dir():
                    shutil.copytree(beside, where / beside.name, dirs_exist_ok=True)
                elif beside.exists():
                    shutil.copy(beside, where / beside.name)
        out.append((label, (target, options)))
    return out


@pytest.mark.parametrize(("fmt", "name"), [(fmt, name) for fmt, samples in SAMPLES.items() for name, _ in samples])
def test_what_convert_writes_lint_score_and_import_take_without_a_flag(fmt: str, name: str, tmp_path: Path) -> None:
    build = dict(SAMPLES[fmt])[name]
    made = build(tmp_path / name)
    if made is None:
        missing(f"the sample {name} of {fmt}", DATA_HOW)
    round_trip(fmt, *made, tmp_path / name)
    if name in ALSO_SAMPLED or name.startswith("real-results"):  # the same file as another sample, with
        return  # other options; a result file's questions are the files sampled above
    for label, variant in variants(fmt, *made, tmp_path / f"{name}-variants"):
        round_trip(fmt, *variant, tmp_path / f"{name}-variants" / label / "check")


def test_every_registered_importer_has_samples() -> None:
    assert sorted(SAMPLES) == sorted(FORMATS)
    # each format has a sample that needs no shared data (the generated ones below are made from it)
    from_data = {"subset-as-lines", "retail-declared-tool-defs"}
    assert all(any(not n.startswith("real") and n not in from_data for n, _ in s) for s in SAMPLES.values())


def test_a_case_repeated_without_its_trial_takes_the_next_free_one(tmp_path: Path) -> None:
    from app.core.records import Trajectory
    from app.importers import convert

    src = tmp_path / "chat.jsonl"
    src.write_text(lines(OPENAI_CONVERSATION, LEGACY, OPENAI_CONVERSATION, OPENAI_CONVERSATION)())
    conversion = convert("openai-messages", src)
    for _ in range(2):  # every pass numbers alike (import reads twice)
        got = [(t.case_id, t.trial) for _, t in conversion.records() if isinstance(t, Trajectory)]
        assert got == [("c1", 0), ("line-2", 0), ("c1", 1), ("c1", 2)]
    assert (
        conversion.notes.count(
            "2 records repeat a case and trial of an earlier one (the source does not tell "
            "them apart): each takes the next free trial"
        )
        == 1
    )


def test_a_stored_run_of_traces_says_no_reference_on_its_page_and_in_its_figures(db_url: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.settings import Settings
    from app.web.app import create_app

    r = invoke("import", otel_traces(tmp_path / "traces.jsonl"), "--format", "otel", "--run", "prod", "--db", db_url)
    assert r.exit_code == 0, r.output
    with TestClient(
        create_app(Settings(database_url=db_url, auto_migrate=False)), base_url="http://127.0.0.1"
    ) as client:
        run = client.get("/api/runs").json()["data"][0]
        figures = client.get(f"/api/runs/{run['id']}/figures").json()
        page = client.get(f"/runs/{run['id']}").text
    assert figures["selection_recall"] == {"num": 0, "den": 0, "no_reference": True}
    assert figures["schema_validity"] == {"num": 3, "den": 3} and figures["with_reference"] == 0
    assert page.count("<b>no reference</b>") == 3  # F1 precision and recall, F2 accuracy
