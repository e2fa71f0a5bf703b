"""Trajectories of traces without tool spans: calls rebuilt from the model
spans' message history (the shapes the instrumentations write: GenAI message
parts, OpenInference's and Traceloop's flattened messages, the older GenAI
events), Traceloop's tool and workflow spans, the answer as text, tool schemas
from the spans, and one trajectory per conversation (``group_by``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.importers import Options, convert
from app.importers.otel import trajectory_record
from app.otlp.spans import Span, grouped_batch

Q = "¿Cuál es el saldo del RUT 12345678-9?"
ERROR = "Error: id must be an integer"
EXPECTED_CALLS = [
    ("buscar_cliente", {"rut": "12345678-9"}, None),
    ("ver_saldo", {"id": "8812"}, ERROR),
    ("ver_saldo", {"id": 8812}, None),
]


def span(
    name: str,
    attributes: dict[str, Any],
    *,
    start: int,
    trace: str = "t1",
    parent: str = "",
    sid: str = "",
    events: list[tuple[str, dict[str, Any]]] | None = None,
) -> Span:
    return Span(trace, sid or f"s{start}", parent, name, start, start + 1, attributes, events=events or [])


def calls_of(record: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    out = []
    for c in record["calls"]:
        args = json.loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"]
        out.append((c["name"], args, c["error"]["message"] if c["error"] else None))
    return out


def parts_history() -> list[dict[str, Any]]:
    def call(i: int, name: str, args: Any) -> dict[str, Any]:
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{i}", "name": name, "arguments": args}]}

    def result(i: int, text: str) -> dict[str, Any]:
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{i}", "response": text}]}

    return [
        {"role": "user", "parts": [{"type": "text", "content": Q}]},
        call(0, "buscar_cliente", {"rut": "12345678-9"}),
        result(0, '{"id": 8812}'),
        call(1, "ver_saldo", {"id": "8812"}),
        result(1, ERROR),
        call(2, "ver_saldo", {"id": 8812}),
        result(2, '{"saldo": 142900}'),
    ]


def test_calls_rebuilt_from_genai_message_parts_of_the_last_model_span() -> None:
    history = parts_history()
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "Tu saldo es $142.900"}]}]
    spans = [
        span(
            "chat gpt-4o",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history[:1]),
                "gen_ai.output.messages": json.dumps(history[1:2]),
            },
            start=1,
        ),
        span(
            "chat gpt-4o",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps(answer),
            },
            start=5,
        ),
    ]
    record = trajectory_record(spans)
    assert calls_of(record) == EXPECTED_CALLS
    assert record["calls"][2]["observation"] == '{"saldo": 142900}'
    assert record["question"] == Q and record["answer"] == "Tu saldo es $142.900"


def openinference_attributes(turn: int) -> dict[str, Any]:
    """An OpenInference LLM span of the plain loop at ``turn`` (0: the question only)."""
    a: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "input.mime_type": "application/json",
        "output.mime_type": "application/json",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": Q,
    }
    for n, (name, args, error) in enumerate(EXPECTED_CALLS[:turn]):
        p, r = f"llm.input_messages.{1 + 2 * n}.message.", f"llm.input_messages.{2 + 2 * n}.message."
        a[f"{p}role"] = "assistant"
        a[f"{p}tool_calls.0.tool_call.id"] = f"call_{n}"
        a[f"{p}tool_calls.0.tool_call.function.name"] = name
        a[f"{p}tool_calls.0.tool_call.function.arguments"] = json.dumps(args)
        a.update({f"{r}role": "tool", f"{r}tool_call_id": f"call_{n}", f"{r}content": error or "{}"})
    if turn < len(EXPECTED_CALLS):
        name, args, _ = EXPECTED_CALLS[turn]
        a.update(
            {
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": f"call_{turn}",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": name,
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": json.dumps(args),
            }
        )
        message: dict[str, Any] = {"role": "assistant", "content": None}
    else:
        a.update(
            {
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "Tu saldo es $142.900",
            }
        )
        message = {"role": "assistant", "content": "Tu saldo es $142.900"}
    a["output.value"] = json.dumps(
        {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    )
    a["llm.tools.0.tool.json_schema"] = json.dumps(
        {
            "type": "function",
            "function": {
                "name": "ver_saldo",
                "description": "Saldo por id interno.",
                "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            },
        }
    )
    return a


def test_calls_rebuilt_from_openinference_flattened_messages_and_the_answer_is_text() -> None:
    spans = [span("ChatCompletion", openinference_attributes(t), start=t) for t in range(4)]
    record = trajectory_record(spans)
    assert calls_of(record) == EXPECTED_CALLS
    assert record["answer"] == "Tu saldo es $142.900"
    # a trajectory of one model call that only called a tool: the call (no result yet); no answer, no JSON
    alone = trajectory_record(spans[:1])
    assert calls_of(alone) == EXPECTED_CALLS[:1] and alone["calls"][0]["observation"] is None
    assert alone["answer"] == "" and alone["question"] == Q


def test_calls_rebuilt_from_traceloop_flattened_prompts_and_older_events() -> None:
    a: dict[str, Any] = {
        "llm.request.type": "chat",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": Q,
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "listo",
    }
    for n, (name, args, error) in enumerate(EXPECTED_CALLS):
        p, r = f"gen_ai.prompt.{1 + 2 * n}.", f"gen_ai.prompt.{2 + 2 * n}."
        a.update(
            {
                f"{p}role": "assistant",
                f"{p}tool_calls.0.id": f"k{n}",
                f"{p}tool_calls.0.name": name,
                f"{p}tool_calls.0.arguments": json.dumps(args),
                f"{r}role": "tool",
                f"{r}tool_call_id": f"k{n}",
                f"{r}content": error or "{}",
            }
        )
    record = trajectory_record([span("openai.chat", a, start=1)])
    assert calls_of(record) == EXPECTED_CALLS and record["answer"] == "listo"

    prompt = [
        {"role": "user", "content": Q},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "buscar_cliente", "arguments": '{"rut": "1-9"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "Error: no existe"},
    ]
    events = [
        ("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(prompt)}),
        (
            "gen_ai.content.completion",
            {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "No existe."}])},
        ),
    ]
    record = trajectory_record([span("chat", {"gen_ai.operation.name": "chat"}, start=1, events=events)])
    assert calls_of(record) == [("buscar_cliente", {"rut": "1-9"}, "Error: no existe")]
    assert record["question"] == Q and record["answer"] == "No existe."


def test_tool_spans_win_over_the_model_history() -> None:
    history = parts_history()
    spans = [
        span("chat", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(history)}, start=1),
        span(
            "execute_tool ver_saldo",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "ver_saldo",
                "gen_ai.tool.call.arguments": '{"id": 1}',
            },
            start=2,
        ),
    ]
    assert [c["name"] for c in trajectory_record(spans)["calls"]] == ["ver_saldo"]


def test_traceloop_tool_and_workflow_spans() -> None:
    def tool(name: str, kwargs: dict[str, Any], output: str, start: int) -> Span:
        return span(
            f"{name}.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": name,
                "traceloop.entity.input": json.dumps({"args": [], "kwargs": kwargs}),
                "traceloop.entity.output": json.dumps(output),
            },
            start=start,
            parent="w",
        )

    spans = [
        span(
            "banca.workflow",
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.name": "banca",
                "traceloop.entity.input": json.dumps({"args": [Q], "kwargs": {}}),
                "traceloop.entity.output": json.dumps("Tu saldo es $142.900"),
            },
            start=0,
            sid="w",
        ),
        tool("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812}', 1),
        tool("ver_saldo", {"id": "8812"}, ERROR, 2),
        tool("ver_saldo", {"id": 8812}, '{"saldo": 142900}', 3),
    ]
    record = trajectory_record(spans)
    assert calls_of(record) == EXPECTED_CALLS
    assert record["calls"][0]["observation"] == '{"id": 8812}'
    assert record["question"] == Q and record["answer"] == "Tu saldo es $142.900"


def export_request(
    spans: list[tuple[str, str, dict[str, Any]]], resource: dict[str, str], first: int = 0
) -> dict[str, Any]:
    def attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"key": k, "value": {"stringValue": v if isinstance(v, str) else json.dumps(v)}} for k, v in d.items()]

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs(resource)},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": sid,
                                "name": "ChatCompletion",
                                "startTimeUnixNano": str(first + i + 1),
                                "endTimeUnixNano": str(first + i + 2),
                                "attributes": attrs(a),
                            }
                            for i, (trace, sid, a) in enumerate(spans)
                        ]
                    }
                ],
            }
        ]
    }


def test_one_trajectory_per_conversation_in_a_file(tmp_path: Path) -> None:
    """Each model call its own trace (no span around the loop): grouped by ``session.id``
    (a span attribute) or by a resource attribute, they are one trajectory."""
    per_call = [
        (f"{t:032x}", f"{t:016x}", {**openinference_attributes(t), "session.id": "conv-1"}) for t in range(1, 5)
    ]
    other = [("f" * 32, "e" * 16, {**openinference_attributes(0), "session.id": "conv-2"})]
    path = tmp_path / "traces.jsonl"
    path.write_text(
        "\n".join(json.dumps(export_request([s], {}, 10 * i)) for i, s in enumerate(per_call + other)) + "\n"
    )
    assert len(list(convert("otel", path).records())) == 5  # one per trace
    conversion = convert("otel", path, Options(group_by="session.id"))
    records = {t.case_id: t for _, t in conversion.records()}  # type: ignore[union-attr]
    assert sorted(records) == ["conv-1", "conv-2"]
    assert [(c.name, c.error is not None) for c in records["conv-1"].calls] == [
        ("buscar_cliente", False),
        ("ver_saldo", True),
        ("ver_saldo", False),
    ]
    assert records["conv-1"].answer == "Tu saldo es $142.900" and len(records["conv-2"].calls) == 1
    # without --tools: the schemas the model spans were offered
    assert conversion.suite["toolset"]["tools"][0]["name"] == "ver_saldo"
    assert conversion.suite["toolset"]["tools"][0]["parameters"]["required"] == ["id"]

    by_resource = tmp_path / "resource.jsonl"
    by_resource.write_text(
        "\n".join(
            json.dumps(
                export_request([(*s[:2], openinference_attributes(i + 1))], {"service.instance.id": "worker-7"}, 10 * i)
            )
            for i, s in enumerate(per_call)
        )
        + "\n"
    )
    (only,) = [t for _, t in convert("otel", by_resource, Options(group_by="service.instance.id")).records()]
    assert only.case_id == "worker-7" and len(only.calls) == 3  # type: ignore[union-attr]


def test_a_grouped_batch_waits_as_a_conversation_and_keeps_its_group_when_read_back() -> None:
    from app.otlp.spans import BATCH_GROUPED, batch_refs

    root = ("a" * 32, "1" * 16, {"session.id": "conv-1"})
    child = ("a" * 32, "2" * 16, {})  # same trace, no key: joins its trace's conversation
    lone = ("b" * 32, "3" * 16, {})
    body, refs = grouped_batch(json.dumps(export_request([root, child, lone], {})).encode(), False, "session.id")
    assert [(r.trace_id, r.is_root) for r in refs] == [("conv-1", False), ("conv-1", False), ("b" * 32, True)]
    # read back after a restart: no span of a grouped request is a root (a conversation it
    # holds waits for the rest, which the next requests bring, and stays one trajectory)
    assert [(r.trace_id, r.is_root) for r in batch_refs(BATCH_GROUPED, body)] == [
        ("conv-1", False),
        ("conv-1", False),
        ("b" * 32, False),
    ]


def test_import_with_group_by_stores_one_trajectory_per_conversation(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    path = tmp_path / "traces.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                export_request(
                    [(f"{t:032x}", f"{t:016x}", {**openinference_attributes(t), "session.id": "conv-1"})], {}, 10 * t
                )
            )
            for t in range(4)
        )
        + "\n"
    )
    db = f"sqlite:///{tmp_path / 'toollens.db'}"
    result = CliRunner().invoke(
        cli, ["import", str(path), "--format", "otel", "--group-by", "session.id", "--run", "sesiones", "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert "tool schemas the traces' model spans were offered" in result.output
    out = tmp_path / "out.jsonl"
    exported = CliRunner().invoke(cli, ["export", "sesiones", "--out", str(out), "--db", db])
    assert exported.exit_code == 0, exported.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["case_id"], len(r["calls"])) for r in records] == [("conv-1", 3)]


def test_tool_schemas_from_genai_tool_definitions() -> None:
    from app.importers.otel import tool_definitions

    defs = [
        {
            "type": "function",
            "name": "ver_saldo",
            "description": "Saldo por id interno.",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        },
        {"type": "function", "function": {"name": "buscar_cliente", "parameters": {"type": "object"}}},
    ]
    found = tool_definitions([span("chat", {"gen_ai.tool.definitions": json.dumps(defs)}, start=1)])
    assert found == {
        "ver_saldo": {
            "name": "ver_saldo",
            "description": "Saldo por id interno.",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        },
        "buscar_cliente": {"name": "buscar_cliente", "description": "", "parameters": {"type": "object"}},
    }
