"""What ToolLens writes, ToolLens reads: every registered importer's output is accepted by
``toollens lint``, ``score`` and ``import`` with no flag (no ``--lenient``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import cli
from tests.importers.test_import_converters import T1, T2, attr, export, span

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
