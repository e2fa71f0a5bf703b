"""Converters (app/importers) on the real third-party samples in
../shared/data and on small hand-written files: every count here was
computed by hand or by tau-bench's own formula."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import Trajectory, parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import load_suite, parse_suite
from app.importers import Options, UnknownFormat, convert
from app.importers.jsonstream import iter_json_values
from tests.resources import DATA, shared_data

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
BFCL = DATA / "bfcl"
runner = CliRunner()


def good(conversion: Any) -> list[Trajectory]:
    out = []
    for _, item in conversion.records():
        assert not isinstance(item, InvalidTrajectory), str(item)
        out.append(item)
    return out


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- tau-bench ------------------------------------------------------------------


@shared_data(TAU, SCHEMAS)
def test_tau_bench_sample_counts_and_domain() -> None:
    c = convert("tau-bench", TAU, Options(tools=SCHEMAS))
    trajs = good(c)
    assert len(trajs) == 100
    assert sum(len(t.calls) for t in trajs) == 621
    assert sum(1 for t in trajs for call in t.calls if call.error is not None) == 63
    assert all(
        call.error.message.startswith("Error:") and not call.error.injected
        for t in trajs
        for call in t.calls
        if call.error is not None
    )
    assert c.suite["toolset"]["name"] == "airline"  # picked from the calls
    assert len(c.suite["toolset"]["tools"]) == 14
    assert len(c.suite["cases"]) == 25
    first = c.suite["cases"][0]
    assert first["id"] == "task-0" and first["match"] == "subset"
    assert [e["name"] for e in first["expected_calls"]] == ["book_reservation"]
    assert trajs[0].reward == 0.0 and trajs[0].question.startswith("Hi! I'm looking to book a flight")
    # the runs cut at tau-bench's step limit (info.reward_info null: the judge never scored them)
    assert sorted((t.case_id, t.trial) for t in trajs if t.stopped == "step_limit") == [
        ("task-2", 1),
        ("task-9", 2),
        ("task-9", 3),
    ]
    assert all(t.stopped in (None, "step_limit") for t in trajs)
    # the policy's free checked bags, read from the system message, for the blame's airline rule
    assert first["notes"][-1] == (
        "policy bags: regular: basic_economy=0 economy=1 business=2 | silver: basic_economy=1 economy=2 "
        "business=3 | gold: basic_economy=2 economy=3 business=3"
    )


@shared_data(TAU, SCHEMAS)
def test_tau_bench_convert_then_score_gives_tau_bench_pass_hat_k(tmp_path: Path) -> None:
    out = tmp_path / "tau"
    r = runner.invoke(cli, ["convert", "--from", "tau-bench", str(TAU), "--tools", str(SCHEMAS), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "(25 cases)" in r.stderr and "(100 trajectories, 621 calls)" in r.stderr
    r = runner.invoke(cli, ["score", str(out / "suite.yaml"), str(out / "trajectories.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["pass_hat_k"] == {"1": 0.31, "2": 0.1933, "3": 0.17, "4": 0.16}
    assert report["trajectories"] == 100
    assert report["schema_validity"] == {"num": 621, "den": 621}
    assert report["hallucinated_tools"] == {"num": 0, "den": 621}
    # every tool error is a recovery case of an imported trace: 29 runs had one
    assert report["recovery"]["den"] == 29


@shared_data(TAU, SCHEMAS)
def test_tau_bench_domain_choice_and_errors(tmp_path: Path) -> None:
    c = convert("tau-bench", TAU, Options(tools=SCHEMAS, domain="retail"))
    assert c.suite["toolset"]["name"] == "retail"
    with pytest.raises(SuiteError, match="no domain 'hotel'"):
        convert("tau-bench", TAU, Options(tools=SCHEMAS, domain="hotel"))
    no_tools = convert("tau-bench", TAU, Options())
    airline = {t["function"]["name"] for t in json.loads(SCHEMAS.read_text())["airline"]}
    assert {t["name"] for t in no_tools.suite["toolset"]["tools"]} == airline  # the runs call all 14
    assert any("inferred" in n for n in no_tools.notes)


def test_a_tau_bench_record_without_its_task_has_no_reference(tmp_path: Path) -> None:
    """A record without ``info.task`` gives a case with no reference (None), not one that expects no call:
    the agent's write in a failed conversation is then not "a write the reference does not hold"."""
    traj = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Hi, I am ana_lima_4410."},
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": "Please check my trip."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "function": {"name": "cancel_reservation", "arguments": '{"reservation_id": "X"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "cancel_reservation", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]
    told = {"task": {"actions": [], "instruction": "You are ana_lima_4410."}, "reward_info": {"reward": 0}}
    for info, expected in (({"reward_info": {"reward": 0}}, None), (told, [])):
        path = tmp_path / "run.json"
        path.write_text(json.dumps([{"task_id": 1, "trial": 0, "reward": 0.0, "info": info, "traj": traj}]))
        c = convert("tau-bench", path, Options(tools=SCHEMAS, domain="airline"))
        assert c.suite["cases"][0]["expected_calls"] == expected
        _, record = next(iter(c.records()))
        assert isinstance(record, Trajectory)
        blame = score_trajectories(parse_suite(c.suite), [record]).cases[0].get("blame_evidence", "")
        assert ("a write the reference does not hold" in blame) is (expected is not None)


# -- BFCL -------------------------------------------------------------------------


@shared_data(BFCL)
@pytest.mark.parametrize(
    ("name", "questions"), [("simple_python", 400), ("parallel_multiple", 200), ("irrelevance", 240)]
)
def test_bfcl_every_question_becomes_a_case(name: str, questions: int, tmp_path: Path) -> None:
    r = runner.invoke(cli, ["convert", "--from", "bfcl", str(BFCL / f"BFCL_v4_{name}.json"), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    suites = [load_suite(p) for p in sorted(tmp_path.glob("suite*.yaml"))]
    ids = [c.id for s in suites for c in s.cases]
    assert len(ids) == len(set(ids)) == questions
    for s in suites:  # every case's own tools are in its suite's toolset, with standard types
        for t in s.toolset:
            assert '"dict"' not in json.dumps(t.parameters) and '"float"' not in json.dumps(t.parameters)


def bfcl_suite(name: str, case_id: str) -> tuple[Any, Any]:
    c = convert("bfcl", BFCL / f"BFCL_v4_{name}.json")
    for doc in [c.suite, *c.extra_suites]:
        suite = parse_suite(doc)
        if suite.case(case_id) is not None:
            return suite, suite.case(case_id)
    raise AssertionError(case_id)


def score_one(suite: Any, case_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    traj = parse_record({"case_id": case_id, "calls": calls, "answer": "ok"})
    return score_trajectories(suite, [traj]).to_json()


@shared_data(BFCL)
def test_bfcl_hand_written_answers() -> None:
    suite, case = bfcl_suite("simple_python", "simple_python_0")
    # ground truth: base [10], height [5], unit ["units", ""] (may be left out)
    assert case.expected_calls[0].arguments == {"base": 10, "height": 5, "unit": "units"}
    right = score_one(
        suite, "simple_python_0", [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]
    )
    assert right["cases"][0]["passed"] is True
    assert right["argument_accuracy"] == {"num": 1, "den": 1}
    with_unit = score_one(
        suite,
        "simple_python_0",
        [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5, "unit": "units"}}],
    )
    assert with_unit["cases"][0]["passed"] is True
    wrong_value = score_one(
        suite, "simple_python_0", [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 6}}]
    )
    assert wrong_value["cases"][0]["failures"] == ["arguments"]
    wrong_type = score_one(
        suite, "simple_python_0", [{"name": "calculate_triangle_area", "arguments": {"base": "10", "height": 5}}]
    )
    assert wrong_type["schema_validity"] == {"num": 0, "den": 1}
    assert "schema" in wrong_type["cases"][0]["failures"]
    assert wrong_type["schema_errors"] == [{"tool": "calculate_triangle_area", "field": "base", "count": 1}]


@shared_data(BFCL)
def test_bfcl_parallel_is_unordered_and_irrelevance_expects_no_call() -> None:
    suite, case = bfcl_suite("parallel_multiple", "parallel_multiple_0")
    assert case.match == "unordered"
    swapped = [
        {"name": "math_toolkit.product_of_primes", "arguments": {"count": 5}},
        {
            "name": "math_toolkit.sum_of_multiples",
            "arguments": {"lower_limit": 1, "upper_limit": 1000, "multiples": [3, 5]},
        },
    ]
    report = score_one(suite, "parallel_multiple_0", swapped)
    assert report["cases"][0]["passed"] is True and report["selection_recall"] == {"num": 2, "den": 2}
    suite, case = bfcl_suite("irrelevance", "irrelevance_0")
    assert case.expected_calls == []
    assert score_one(suite, "irrelevance_0", [])["cases"][0]["passed"] is True
    called = score_one(
        suite, "irrelevance_0", [{"name": "determine_body_mass_index", "arguments": {"weight": 70.0, "height": 1.75}}]
    )
    assert called["cases"][0]["failures"] == ["selection"]
    assert called["confusion"][0]["expected"] == "(extra)"


@shared_data(BFCL)
def test_bfcl_without_answers_names_the_question(tmp_path: Path) -> None:
    src = tmp_path / "BFCL_v4_simple_python.json"
    src.write_text((BFCL / "BFCL_v4_simple_python.json").read_text())
    with pytest.raises(SuiteError, match=r"line 1: no possible answer for 'simple_python_0'"):
        convert("bfcl", src)


# -- chat logs --------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]

OPENAI_CONVERSATION = {
    "id": "c1",
    "tools": TOOLS,
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Weather in Lima?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": 7}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "Error: city must be a string"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}},
                {"id": "c", "type": "function", "function": {"name": "get_forecast", "arguments": '{"city": "Lima"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": '{"error": "no such tool"}'},
        {"role": "tool", "tool_call_id": "b", "content": "18 C, cloudy"},
        {"role": "assistant", "content": "18 C and cloudy in Lima."},
    ],
}
LEGACY = [
    {"role": "user", "content": "Weather in Quito?"},
    {"role": "assistant", "content": "", "function_call": {"name": "get_weather", "arguments": '{"city": "Quito"'}},
    {"role": "function", "name": "get_weather", "content": "12 C"},
    {"role": "assistant", "content": "12 C."},
]


def test_openai_messages_calls_results_errors_and_legacy(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "chat.jsonl", [OPENAI_CONVERSATION, LEGACY])
    c = convert("openai-messages", src)
    first, second = good(c)
    assert first.case_id == "c1" and first.question == "Weather in Lima?" and first.answer == "18 C and cloudy in Lima."
    assert [(x.name, x.arguments, x.observation) for x in first.calls] == [
        ("get_weather", {"city": 7}, "Error: city must be a string"),
        ("get_weather", {"city": "Lima"}, "18 C, cloudy"),  # matched by id, not by order
        ("get_forecast", {"city": "Lima"}, '{"error": "no such tool"}'),
    ]
    assert [x.error is not None for x in first.calls] == [True, False, True]
    assert second.case_id == "line-2" and second.calls[0].arguments == '{"city": "Quito"'  # kept verbatim
    assert second.calls[0].observation == "12 C"
    # the declared tools are the toolset: reference-free metrics hold
    report = score_trajectories(parse_suite(c.suite), [first, second]).to_json()
    assert report["hallucinated_tools"] == {"num": 1, "den": 4}
    assert report["schema_validity"] == {"num": 1, "den": 3}  # city 7, and the unparsable string, fail
    assert report["schema_errors"] == [
        {"tool": "get_weather", "field": "", "count": 1},  # not JSON at all
        {"tool": "get_weather", "field": "city", "count": 1},
    ]
    assert report["recovery"]["den"] == 1  # the first conversation had a tool error
    assert report["reactions"] == [
        {"error_kind": "error", "reaction": "answered", "acceptable": True, "count": 1},  # after get_forecast
        {"error_kind": "error", "reaction": "retry_corrected", "acceptable": True, "count": 1},  # city 7 -> "Lima"
        {"error_kind": "schema", "reaction": "answered", "acceptable": True, "count": 1},  # the legacy call
    ]
    assert [c["failures"] for c in report["cases"]] == [["schema", "hallucinated_tool"], ["schema"]]


def test_openai_messages_array_file_is_the_same_as_lines(tmp_path: Path) -> None:
    lines = good(convert("openai-messages", write_jsonl(tmp_path / "a.jsonl", [OPENAI_CONVERSATION, LEGACY])))
    array = tmp_path / "a.json"
    array.write_text(json.dumps([OPENAI_CONVERSATION, LEGACY], indent=2))
    from_array = good(convert("openai-messages", array))
    assert [t.calls for t in from_array] == [t.calls for t in lines]
    assert from_array[1].case_id.startswith("line-")
    bare = write_jsonl(tmp_path / "bare.jsonl", [OPENAI_CONVERSATION["messages"], LEGACY])  # a message list a line
    assert [(t.case_id, t.calls) for t in good(convert("openai-messages", bare))] == [
        ("line-1", lines[0].calls),
        ("line-2", lines[1].calls),
    ]


def test_anthropic_messages_tool_use_and_is_error(tmp_path: Path) -> None:
    conv = {
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
                "content": [{"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Lima"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "18 C"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "18 C in Lima."}]},
        ],
    }
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [{"name": "get_weather", "description": "Weather.", "input_schema": TOOLS[0]["function"]["parameters"]}]
        )
    )
    c = convert("anthropic-messages", write_jsonl(tmp_path / "a.jsonl", [conv]), Options(tools=tools))
    (t,) = good(c)
    assert (t.question, t.answer) == ("Weather in Lima?", "18 C in Lima.")
    assert [(x.observation, x.error.message if x.error else None) for x in t.calls] == [
        ("upstream timeout", "upstream timeout"),
        ("18 C", None),
    ]
    report = score_trajectories(parse_suite(c.suite), [t]).to_json()
    assert report["reactions"][0]["reaction"] == "retry_same"


# -- OTLP JSON files -------------------------------------------------------------


def attr(key: str, value: Any) -> dict[str, Any]:
    kind = {str: "stringValue", int: "intValue", bool: "boolValue", float: "doubleValue"}[type(value)]
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def span(trace: str, sid: str, parent: str, name: str, start: int, attrs: list[Any], error: str = "") -> dict[str, Any]:
    s = {
        "traceId": trace,
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 5),
        "attributes": attrs,
    }
    if error:
        s["status"] = {"code": 2, "message": error}
    return s


def export(*spans: Any) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]}


T1 = "0af7651916cd43dd8448eb211c80319c"
T2 = "1bf7651916cd43dd8448eb211c80319d"


def test_otel_file_genai_and_openinference_spans(tmp_path: Path) -> None:
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Lima?"}]}])
    said = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "18 C."}]}])
    line1 = export(  # trace 1's tools, in reverse order, before its root
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
        span(T1, "c1", "a1", "chat", 50, [attr("gen_ai.operation.name", "chat"), attr("gen_ai.input.messages", user)]),
        span(
            T1, "c2", "a1", "chat", 400, [attr("gen_ai.operation.name", "chat"), attr("gen_ai.output.messages", said)]
        ),
        span(
            T1,
            "a1",
            "",
            "invoke_agent",
            10,
            [attr("gen_ai.operation.name", "invoke_agent"), attr("toollens.reward", 1.0)],
        ),
    )
    src = write_jsonl(tmp_path / "traces.jsonl", [line1, line2])
    c = convert("otel", src)
    t1, t2 = good(c)
    assert t1.case_id == T1 and t1.question == "Weather in Lima?" and t1.answer == "18 C." and t1.reward == 1.0
    assert [(x.name, x.arguments, x.error.message if x.error else None, x.observation) for x in t1.calls] == [
        ("get_weather", {"city": 7}, "city must be a string", None),
        ("get_weather", {"city": "Lima"}, None, "18 C"),
    ]
    assert (t2.case_id, t2.question, t2.answer) == ("s-9", "Hi", "Bye")
    assert [(x.name, x.arguments, x.observation) for x in t2.calls] == [("lookup", {"q": "x"}, "found")]
    # one pretty-printed export request is read too
    one = tmp_path / "one.json"
    one.write_text(json.dumps(line1, indent=2))
    assert len(good(convert("otel", one))) == 2


# -- bad input ------------------------------------------------------------------------


def test_bad_lines_are_named_and_nothing_is_written(tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(json.dumps(OPENAI_CONVERSATION) + "\n{not json\n" + json.dumps({"messages": 3}) + "\n")
    out = tmp_path / "out"
    r = runner.invoke(cli, ["convert", "--from", "openai-messages", str(src), "--out", str(out)])
    assert r.exit_code == 2
    assert "2 bad records, nothing written" in r.stderr
    assert "line 2: not valid JSON" in r.stderr and "line 3: messages: required, a list of messages" in r.stderr
    assert not (out / "trajectories.jsonl").exists() and not (out / "suite.yaml").exists()
    r = runner.invoke(cli, ["convert", "--from", "openai-messages", str(src), "--out", str(out), "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 1
    assert yaml.safe_load((out / "suite.yaml").read_text())["toolset"]["tools"][0]["name"] == "get_weather"


def test_truncated_array_names_the_line(tmp_path: Path) -> None:
    whole = json.dumps([OPENAI_CONVERSATION, LEGACY, OPENAI_CONVERSATION], indent=1)
    src = tmp_path / "cut.json"
    src.write_text(whole[: len(whole) - 200])
    items = list(iter_json_values(src))
    assert [type(v).__name__ for _, v in items] == ["dict", "list", "InvalidTrajectory"]
    line, err = items[-1]
    third = whole.count("\n", 0, whole.rindex('{\n  "id": "c1"')) + 1
    assert line == third and "truncated file" in str(err) and f"cut.json:{third}" in str(err)


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UnknownFormat, match=r"unknown format 'csv' \(known: toollens, openai-messages"):
        convert("csv", tmp_path / "x")
    r = runner.invoke(
        cli, ["convert", "--from", "openai-messages", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)]
    )
    assert r.exit_code == 2 and "missing.jsonl: file not found" in r.stderr
