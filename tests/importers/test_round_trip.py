"""What ToolLens writes, ToolLens reads: every registered importer's output is accepted by
``toollens lint``, ``score`` and ``import`` with no flag (no ``--lenient``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import cli
from tests.importers.test_import_converters import T1, T2, attr, export, span
from tests.resources import DATA, shared_data

runner = CliRunner()


def otel_traces(path: Path) -> Path:
    """Two traces without a reference: one with a tool error the agent never got past, one clean."""
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Lima?"}]}])
    line1 = export(
        span(T1, "b2", "a1", "execute_tool get_weather", 300,
             [attr("gen_ai.operation.name", "execute_tool"), attr("gen_ai.tool.name", "get_weather"),
              attr("gen_ai.tool.call.arguments", "{\"city\": \"Lima\"}"), attr("gen_ai.tool.call.result", "18 C")]),
        span(T1, "b1", "a1", "execute_tool get_weather", 100,
             [attr("gen_ai.operation.name", "execute_tool"), attr("gen_ai.tool.name", "get_weather"),
              attr("gen_ai.tool.call.arguments", "{\"city\": 7}")], error="city must be a string"),
        span(T2, "d1", "", "agent", 50, [attr("openinference.span.kind", "AGENT"), attr("input.value", "Hi"),
                                         attr("output.value", "Bye"), attr("session.id", "s-9")]),
        span(T2, "d2", "d1", "lookup", 60, [attr("openinference.span.kind", "TOOL"), attr("tool.name", "lookup"),
                                            attr("input.value", "{\"q\": \"x\"}"), attr("output.value", "found")]),
    )
    line2 = export(span(T1, "c1", "a1", "chat", 50, [attr("gen_ai.operation.name", "chat"),
                                                     attr("gen_ai.input.messages", user)]),
                   span(T1, "a1", "", "invoke_agent", 10, [attr("gen_ai.operation.name", "invoke_agent")]))
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
    assert data["usage"]["tool_latency_ms"]["p50"] is not None  # the spans' durations
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
    assert data["suites"][0] == {"file": "suite.yaml", "name": "BFCL_v4_multi_turn_base", "cases": 2,
                                 "trajectories": 2}
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
    suite.write_text("name: s\ntoolset: {name: t, tools: [{name: a, description: A., parameters: {type: object}}]}\n"
                     "cases: [{id: c1, question: q}]\n")
    r = invoke("score", suite)
    assert r.exit_code == 2 and "give the trajectories file too" in r.stderr
    (tmp_path / "suite-2.yaml").write_text(suite.read_text())
    (tmp_path / "trajectories.jsonl").write_text("")
    r = invoke("score", tmp_path)
    assert r.exit_code == 2 and "case 'c1' is in both suite.yaml and suite-2.yaml" in r.stderr
