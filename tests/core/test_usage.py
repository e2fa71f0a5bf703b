"""Tokens, cost and latency without a database: the record's ``model_calls``
and ``latency_ms``, the price table, the nearest-rank percentiles, the
``usage`` object of ``score --json`` (hand-computed), and what the public runs
carry (ToolBench: total tokens only; tau-bench: nothing for the agent)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.core.errors import InvalidTrajectory
from app.core.prices import PriceTableError, bundled_prices, current_prices, load_prices, parse_prices
from app.core.records import Trajectory, parse_record
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import parse_suite
from app.core.usage import ModelCall, UsageTally, percentile, spread, totals_by_model, trajectory_cost
from app.core.usage_formats import anthropic_model_call, logged_model_call, openai_model_call
from app.importers import Options, convert
from app.importers.base import Conversion
from app.importers.otel import trajectory_record
from app.otlp.spans import Span
from tests.factories import BANKING_TOOLS, OK_CLIENTE, OK_SALDO, SALDO_CASE, record
from tests.resources import DATA, shared_data

TOOLBENCH = DATA / "toolbench"
TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
TAU_TOOLS = DATA / "tau_bench_tool_schemas_airline_retail.json"

# gpt-4o at $2.50 / $10.00 / $1.25 cached per million: 800 fresh + 200 cached in, 500 out
#   = (800 * 2.50 + 200 * 1.25 + 500 * 10.00) / 10^6 = (2000 + 250 + 5000) / 10^6 = 0.00725
GPT4O_REQUEST = {
    "model": "gpt-4o-2024-08-06",
    "input_tokens": 1000,
    "cached_tokens": 200,
    "output_tokens": 500,
    "latency_ms": 900.0,
}
# 1500 in, 20 out: (1500 * 2.50 + 20 * 10.00) / 10^6 = 0.00395
GPT4O_SHORT = {"model": "gpt-4o", "input_tokens": 1500, "output_tokens": 20, "latency_ms": 300.0}


def trajectories(conversion: Conversion) -> Iterator[Trajectory]:
    for _, item in conversion.records():
        assert not isinstance(item, InvalidTrajectory), str(item)
        yield item


def test_nearest_rank_percentiles_are_observed_values() -> None:
    values = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    # rank ceil(p/100 * n): p50 of 10 values is the 5th, p95 the 10th
    assert spread(values) == {"p50": 50.0, "p95": 100.0}
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0  # rank ceil(1.5) = 2 of 1, 3, 5
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    twenty = [float(i) for i in range(1, 21)]
    assert percentile(twenty, 95) == 19.0  # rank ceil(19.0) = 19


def test_prices_match_dated_snapshots_and_providers_and_unknown_models_cost_nothing_known() -> None:
    prices = bundled_prices()
    assert prices.date == "2025-08-01"
    assert prices.price("gpt-4o-2024-08-06") == prices.price("gpt-4o") == prices.price("openai/GPT-4o")
    assert prices.price("gpt-4o-mini-2024-07-18") == prices.price("gpt-4o-mini") != prices.price("gpt-4o")
    assert prices.price("claude-sonnet-4-20250514") == prices.price("claude-sonnet-4")
    assert prices.price("o3-mini") != prices.price("o3")
    assert prices.cost("gpt-4o", 1000, 500, 200) == pytest.approx(0.00725)
    assert prices.cost("my-local-llama", 1000, 500) is None  # never 0
    assert prices.cost("gpt-4o", None, None) is None  # no split: not priced
    assert prices.price("gpt-4o-audio-preview") == prices.price("gpt-4o")  # the longest listed prefix


def test_a_price_file_extends_the_bundled_table_and_bad_ones_are_named(tmp_path: Path, monkeypatch) -> None:
    f = tmp_path / "prices.yaml"
    f.write_text(
        "date: '2026-01-01'\nmodels:\n  my-llama: {input: 0.1, output: 0.2}\n  gpt-4o: {input: 5, output: 20}\n"
    )
    table = load_prices(f)
    assert table.date == "2026-01-01"
    assert table.cost("my-llama", 1_000_000, 1_000_000) == pytest.approx(0.3)
    assert table.cost("gpt-4o", 1000, 500, 200) == pytest.approx((1000 * 5 + 500 * 20) / 1e6)  # no cached price
    assert table.cost("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)  # still bundled
    monkeypatch.setenv("TOOLLENS_PRICES", str(f))
    assert current_prices().cost("my-llama", 1_000_000, 0) == pytest.approx(0.1)
    with pytest.raises(PriceTableError, match=r"models.x: needs `input` and `output`"):
        parse_prices({"models": {"x": {"input": 1}}}, "p.yaml")
    with pytest.raises(PriceTableError, match=r"models.x.output: must be a price"):
        parse_prices({"models": {"x": {"input": 1, "output": -2}}}, "p.yaml")
    with pytest.raises(PriceTableError, match="unknown key 'cache'"):
        parse_prices({"models": {"x": {"input": 1, "output": 2, "cache": 1}}}, "p.yaml")


def test_the_record_carries_usage_and_latency_and_absent_stays_absent() -> None:
    t = record(
        calls=[
            {**OK_CLIENTE, "latency_ms": 12.5},
            {
                **OK_SALDO,
                "error": {"kind": "timeout", "message": "slow", "injected": True, "delay_ms": 250},
                "latency_ms": 251,
            },
        ],
        model_calls=[GPT4O_REQUEST, {"total_tokens": 42}],
    )
    assert t.calls[0].latency_ms == 12.5 and t.calls[1].error is not None and t.calls[1].error.delay_ms == 250.0
    assert t.model_calls == [ModelCall("gpt-4o-2024-08-06", 1000, 500, 200, None, 900.0), ModelCall(total_tokens=42)]
    again = parse_record(json.loads(t.to_json()))
    assert again.to_dict() == t.to_dict()
    assert t.to_dict()["model_calls"][1] == {"total_tokens": 42}  # no key invented, none set to zero
    plain = record(calls=[OK_CLIENTE]).to_dict()
    assert "model_calls" not in plain and "latency_ms" not in plain["calls"][0]
    assert "delay_ms" not in record(calls=[{**OK_SALDO, "error": "boom"}]).to_dict()["calls"][0]["error"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"model_calls": {"input_tokens": 1}}, "model_calls"),
        ({"model_calls": [{"input_tokens": -1}]}, "model_calls[0].input_tokens"),
        ({"model_calls": [{"output_tokens": True}]}, "model_calls[0].output_tokens"),
        ({"model_calls": [{"output_tokens": 1.5}]}, "model_calls[0].output_tokens"),
        ({"model_calls": [{}, {"latency_ms": "fast"}]}, "model_calls[1].latency_ms"),
        ({"model_calls": [{"model": 4}]}, "model_calls[0].model"),
        ({"model_calls": [{"input_tokens": 2**60}]}, "model_calls[0].input_tokens"),
        ({"calls": [{"name": "ver_saldo", "latency_ms": -3}]}, "calls[0].latency_ms"),
        ({"calls": [{"name": "ver_saldo", "latency_ms": float("nan")}]}, "calls[0].latency_ms"),
        ({"calls": [{"name": "ver_saldo", "error": {"kind": "timeout", "delay_ms": "1s"}}]}, "calls[0].error.delay_ms"),
    ],
)
def test_bad_usage_is_refused_naming_the_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTrajectory) as err:
        parse_record({"case_id": "c", **extra}, index=3)
    assert err.value.field == field and err.value.index == 3


Row = tuple[list[dict[str, Any]] | None, list[tuple[str, float]], bool, str | None]


def tally_of(*trajectories: Row) -> UsageTally:
    tally = UsageTally()
    for calls, tools, passed, outcome in trajectories:
        mcs = None if calls is None else [ModelCall(**c) for c in calls]
        tally.add(mcs, tools, passed=passed, failures=() if passed else ("recovery_confused",), outcome=outcome)
    return tally


def test_usage_figures_by_hand() -> None:
    u = tally_of(
        ([GPT4O_REQUEST, GPT4O_SHORT], [("buscar_cliente", 120.0), ("ver_saldo", 40.0)], True, None),
        (
            [{"model": "my-llama", "input_tokens": 100, "output_tokens": 50, "latency_ms": 2000.0}],
            [("ver_saldo", 2250.0)],
            False,
            "confused",
        ),
        ([{"total_tokens": 1000}], [], True, "recovered"),
        (None, [("ver_saldo", 10.0)], True, None),
    ).to_json(bundled_prices())
    assert u["input_tokens"] == 1000 + 1500 + 100 and u["output_tokens"] == 500 + 20 + 50
    assert u["cached_tokens"] == 200
    assert u["total_tokens"] == 1500 + 1520 + 150 + 1000  # input + output, or the total when there is no split
    assert u["cost_usd"] == pytest.approx(0.00725 + 0.00395)  # my-llama and the unsplit total have no price
    assert u["trajectories_with_usage"] == 3 and u["trajectories_priced"] == 1 and u["model_calls"] == 4
    assert u["unpriced_models"] == ["my-llama"]  # the unsplit total is counted, not listed as unpriced
    # model latencies 300, 900, 2000: p50 rank 2, p95 rank 3; tools 10, 40, 120, 2250: ranks 2 and 4
    assert u["model_latency_ms"] == {"p50": 900.0, "p95": 2000.0}
    assert u["tool_latency_ms"] == {"p50": 40.0, "p95": 2250.0}
    assert u["by_result"]["passed"] == {
        "trajectories": 3,
        "trajectories_with_usage": 2,
        "total_tokens": 4020,
        "mean_tokens": 2010.0,
        "cost_usd": 0.0112,
        "trajectories_priced": 1,
    }
    assert u["by_result"]["failed"] == {
        "trajectories": 1,
        "trajectories_with_usage": 1,
        "total_tokens": 150,
        "mean_tokens": 150.0,
        "cost_usd": None,
        "trajectories_priced": 0,
    }
    assert [(g["outcome"], g["total_tokens"]) for g in u["by_outcome"]] == [("confused", 150), ("recovered", 1000)]
    assert u["by_tool"] == [
        {"tool": "buscar_cliente", "calls": 1, "latency_ms": {"p50": 120.0, "p95": 120.0}},
        {"tool": "ver_saldo", "calls": 3, "latency_ms": {"p50": 40.0, "p95": 2250.0}},
    ]


def test_no_usage_is_null_never_zero() -> None:
    u = tally_of((None, [], True, None)).to_json(bundled_prices())
    assert {k: u[k] for k in ("input_tokens", "output_tokens", "total_tokens", "cost_usd")} == dict.fromkeys(
        ("input_tokens", "output_tokens", "total_tokens", "cost_usd")
    )
    assert u["model_latency_ms"] == {"p50": None, "p95": None} == u["tool_latency_ms"]
    assert u["trajectories_with_usage"] == 0


def test_a_run_costs_the_same_from_its_per_model_sums() -> None:
    calls = [ModelCall(**GPT4O_REQUEST), ModelCall(**GPT4O_SHORT)]
    cost, whole = trajectory_cost(calls, bundled_prices())
    sums = {
        "gpt-4o-2024-08-06": {"input_tokens": 1000, "output_tokens": 500, "cached_tokens": 200},
        "gpt-4o": {"input_tokens": 1500, "output_tokens": 20},
        "": {"unsplit_tokens": 7},
    }
    assert whole and totals_by_model(sums, bundled_prices()) == (3027, round(cost or 0, 6))
    assert totals_by_model({}, bundled_prices()) == (None, None)


def test_provider_usage_shapes() -> None:
    openai = {
        "model": "gpt-4o-2024-08-06",
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "prompt_tokens_details": {"cached_tokens": 200}},
    }
    assert openai_model_call(openai, "gpt-4o", 12.3456) == ModelCall("gpt-4o-2024-08-06", 1000, 500, 200, None, 12.346)
    anthropic = {
        "model": "claude-sonnet-4-20250514",
        "usage": {
            "input_tokens": 300,
            "output_tokens": 40,
            "cache_read_input_tokens": 700,
            "cache_creation_input_tokens": 0,
        },
    }
    # Anthropic counts cache reads beside input_tokens: the record's input is the whole prompt
    assert anthropic_model_call(anthropic) == ModelCall("claude-sonnet-4-20250514", 1000, 40, 700)
    assert logged_model_call({"role": "assistant", "content": "x"}) is None
    assert logged_model_call({"role": "assistant", **openai, "latency_ms": 5}) == ModelCall(
        "gpt-4o-2024-08-06", 1000, 500, 200, None, 5.0
    )
    assert openai_model_call({"usage": {"prompt_tokens": "many"}}, "m") == ModelCall("m")


def test_message_logs_that_carry_usage_import_it(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(
        json.dumps(
            [
                {"role": "user", "content": "saldo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "model": "gpt-4o",
                    "usage": {"prompt_tokens": 80, "completion_tokens": 9},
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "ver_saldo", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "{}"},
                {
                    "role": "assistant",
                    "content": "listo",
                    "model": "gpt-4o",
                    "usage": {"prompt_tokens": 120, "completion_tokens": 3},
                },
            ]
        )
        + "\n"
    )
    recs = list(trajectories(convert("openai-messages", log)))
    assert [m.to_dict() for m in recs[0].model_calls] == [  # type: ignore[union-attr]
        {"model": "gpt-4o", "input_tokens": 80, "output_tokens": 9},
        {"model": "gpt-4o", "input_tokens": 120, "output_tokens": 3},
    ]


def _span(name: str, attrs: dict[str, Any], start_ms: float, end_ms: float, sid: str) -> Span:
    return Span("t1", sid, "root" if sid != "root" else "", name, int(start_ms * 1e6), int(end_ms * 1e6), attrs)


def test_otel_model_spans_give_model_calls_and_tool_spans_their_duration() -> None:
    t0 = 1_700_000_000_000.0  # ms since the epoch
    spans = [
        _span(
            "invoke_agent",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.usage.input_tokens": 999,
                "toollens.case_id": "saldo-001",
            },
            t0,
            t0 + 5000,
            "root",
        ),
        _span(
            "chat gpt-4o",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 500,
            },
            t0 + 10,
            t0 + 910,
            "a",
        ),
        _span(
            "execute_tool ver_saldo",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "ver_saldo",
                "gen_ai.tool.call.arguments": '{"id": 8812}',
            },
            t0 + 920,
            t0 + 960.5,
            "b",
        ),
        _span(
            "ChatCompletion",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 1200,
                "llm.token_count.completion": 30,
                "llm.token_count.prompt_details.cache_read": 1024,
            },
            t0 + 970,
            t0 + 1270,
            "c",
        ),
        _span("legacy", {"llm.token_count.total": 77}, t0 + 1300, t0 + 1301, "d"),
    ]
    rec = trajectory_record(spans)
    assert rec["model_calls"] == [  # the agent span's own sum is not a request: not counted twice
        {"model": "gpt-4o-2024-08-06", "input_tokens": 1000, "output_tokens": 500, "latency_ms": 900.0},
        {"model": "gpt-4o-mini", "input_tokens": 1200, "output_tokens": 30, "cached_tokens": 1024, "latency_ms": 300.0},
        {"total_tokens": 77, "latency_ms": 1.0},
    ]
    assert rec["calls"][0]["latency_ms"] == 40.5
    assert parse_record(rec).model_calls is not None


def test_score_json_has_usage_and_prices_from_a_file(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "banca", "toolset": BANKING_TOOLS, "cases": [SALDO_CASE]}))
    lines = tmp_path / "t.jsonl"
    rec = record(
        calls=[{**OK_CLIENTE, "latency_ms": 100.0}, {**OK_SALDO, "latency_ms": 300.0}],
        answer="Tu saldo es $142.900",
        model_calls=[GPT4O_REQUEST, {"model": "my-llama", "input_tokens": 10, "output_tokens": 10}],
    )
    lines.write_text(rec.to_json() + "\n")
    runner = CliRunner()
    out = runner.invoke(cli, ["score", str(suite), str(lines), "--json"])
    assert out.exit_code == 0, out.output
    usage = json.loads(out.output)["usage"]
    assert usage["cost_usd"] == 0.00725 and usage["unpriced_models"] == ["my-llama"]
    assert usage["tool_latency_ms"] == {"p50": 100.0, "p95": 300.0}
    prices = tmp_path / "p.yaml"
    prices.write_text("models:\n  my-llama: {input: 1000, output: 1000}\n")  # $0.01 per 10 tokens
    out = runner.invoke(cli, ["score", str(suite), str(lines), "--json", "--prices", str(prices)])
    assert json.loads(out.output)["usage"]["cost_usd"] == pytest.approx(0.00725 + 0.02)
    text = runner.invoke(cli, ["score", str(suite), str(lines)]).output
    assert "usage: 1,520 tokens (1 of 1 trajectories)" in text and "tools p50 100 ms, p95 300 ms" in text
    bad = runner.invoke(cli, ["score", str(suite), str(lines), "--prices", str(tmp_path / "none.yaml")])
    assert bad.exit_code == 2 and "cannot read the price file" in bad.output


@shared_data(TOOLBENCH)
def test_toolbench_total_tokens_are_counted_not_priced() -> None:
    conversion = convert("toolbench", TOOLBENCH)
    tally = UsageTally()
    report = score_trajectories(parse_suite(conversion.suite), trajectories(conversion), usage=tally)
    u = tally.to_json(bundled_prices())
    # answer_generation.total_tokens of runs 10, 11, 57, 59 (won) and 69 (lost)
    assert u["total_tokens"] == 2916 + 4492 + 29108 + 9315 + 25047 == 70878
    assert u["input_tokens"] is None and u["output_tokens"] is None and u["cost_usd"] is None
    assert u["trajectories_with_usage"] == 5 and u["trajectories_priced"] == 0 and u["unpriced_models"] == []
    assert u["by_result"]["passed"]["total_tokens"] == 2916 + 4492 + 29108 + 9315 == 45831
    assert u["by_result"]["passed"]["mean_tokens"] == 11457.8  # 45831 / 4 = 11457.75
    assert u["by_result"]["failed"]["total_tokens"] == 25047
    # the one recovery (run 57) cost 29108 tokens; the confused run 69, 25047
    assert [(g["outcome"], g["total_tokens"]) for g in u["by_outcome"]] == [("confused", 25047), ("recovered", 29108)]
    assert u["model_latency_ms"] == {"p50": None, "p95": None} and report.trajectories == 5


@shared_data(TAU, TAU_TOOLS)
def test_tau_bench_carries_no_usage_of_the_agent() -> None:
    conversion = convert("tau-bench", TAU, Options(tools=TAU_TOOLS))
    tally = UsageTally()
    score_trajectories(parse_suite(conversion.suite), trajectories(conversion), usage=tally)
    u = tally.to_json(bundled_prices())
    # only info.user_cost (the simulated user's, not the agent's): nothing to count, and nothing set to zero
    assert u["trajectories_with_usage"] == 0 and u["total_tokens"] is None and u["cost_usd"] is None
    assert u["by_result"]["passed"]["trajectories"] == 31 and u["by_result"]["failed"]["trajectories"] == 69
