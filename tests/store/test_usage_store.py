"""Usage through the store and the app, on both databases: ``/api/runs/{id}/figures``
gains ``usage`` (hand-computed), the runs list prices from its counters, the
trajectory keeps its model requests and call latencies (and exports them back),
a new price file re-prices a stored run, the pages show it, and the gate
takes optional relative tolerances on cost and latency. Real HTTP."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

from app.cli import cli
from app.core.reports.gate import GateConfigError, parse_gate_config
from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.factories import BANKING_TOOLS, SALDO_CASE

HTML = {"accept": "text/html"}
SUITE = {"name": "banca", "toolset": BANKING_TOOLS, "cases": [SALDO_CASE]}
CLIENTE = {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}, "observation": '{"id": 8812}', "error": None}
SALDO = {"name": "ver_saldo", "arguments": {"id": 8812}, "observation": '{"saldo": 142900}', "error": None}
TIMEOUT = {
    "name": "ver_saldo",
    "arguments": {"id": 8812},
    "observation": "ERROR: timeout",
    "error": {"kind": "timeout", "message": "ERROR: timeout", "injected": True, "delay_ms": 250.0},
}
# cost of each request, gpt-4o at $2.50 in / $10.00 out / $1.25 cached per million tokens:
#   (800 * 2.50 + 200 * 1.25 + 500 * 10) / 10^6 = 0.00725 and (1500 * 2.50 + 20 * 10) / 10^6 = 0.00395
PASSING = {
    "case_id": "saldo-001",
    "trial": 0,
    "question": "q",
    "answer": "Tu saldo es $142.900",
    "fault": None,
    "calls": [{**CLIENTE, "latency_ms": 120.0}, {**SALDO, "latency_ms": 40.5}],
    "model_calls": [
        {
            "model": "gpt-4o-2024-08-06",
            "input_tokens": 1000,
            "output_tokens": 500,
            "cached_tokens": 200,
            "latency_ms": 900.0,
        },
        {"model": "gpt-4o", "input_tokens": 1500, "output_tokens": 20, "latency_ms": 300.0},
    ],
}
# a recovery that invents nothing but never gets the datum: fails (recovery_confused); an unknown model
FAILING = {
    "case_id": "saldo-001",
    "trial": 1,
    "question": "q",
    "answer": "Listo.",
    "fault": {"step": 1, "kind": "timeout"},
    "calls": [{**CLIENTE, "latency_ms": 80.0}, {**TIMEOUT, "latency_ms": 251.0}],
    "model_calls": [{"model": "my-llama", "input_tokens": 4000, "output_tokens": 100, "latency_ms": 1500.0}],
}
NO_USAGE = {
    "case_id": "saldo-001",
    "trial": 2,
    "question": "q",
    "answer": "Tu saldo es $142.900",
    "fault": None,
    "calls": [CLIENTE, SALDO],
}


def store(c: TestClient, name: str, *records: dict[str, Any], model: str = "gpt-4o") -> int:
    rid = int(c.post("/api/runs", json={"name": name, "suite": SUITE, "model": model}).json()["id"])
    r = c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": list(records)})
    assert r.status_code == 200, r.text
    return rid


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def test_figures_usage_by_hand(client: TestClient) -> None:
    rid = store(client, "u", PASSING, FAILING, NO_USAGE)
    u = client.get(f"/api/runs/{rid}/figures").json()["usage"]
    assert (u["input_tokens"], u["output_tokens"], u["cached_tokens"]) == (6500, 620, 200)
    assert u["total_tokens"] == 3020 + 4100
    assert u["cost_usd"] == 0.0112  # my-llama has no price: listed, never costed at 0
    assert u["unpriced_models"] == ["my-llama"] and u["trajectories_priced"] == 1
    assert u["trajectories_with_usage"] == 2 and u["model_calls"] == 3
    assert u["model_latency_ms"] == {"p50": 900.0, "p95": 1500.0}  # 300, 900, 1500: ranks 2 and 3
    # tools 40.5, 80, 120, 251 (NO_USAGE's calls have no latency): ranks 2 and 4
    assert u["tool_latency_ms"] == {"p50": 80.0, "p95": 251.0}
    assert u["by_result"]["passed"]["trajectories"] == 2 and u["by_result"]["passed"]["total_tokens"] == 3020
    assert u["by_result"]["failed"] == {
        "trajectories": 1,
        "trajectories_with_usage": 1,
        "total_tokens": 4100,
        "mean_tokens": 4100.0,
        "cost_usd": None,
        "trajectories_priced": 0,
    }
    assert u["by_tool"][1] == {"tool": "ver_saldo", "calls": 2, "latency_ms": {"p50": 40.5, "p95": 251.0}}
    run = client.get(f"/api/runs/{rid}").json()
    assert (run["total_tokens"], run["cost_usd"]) == (7120, 0.0112)
    assert client.get("/api/runs").json()["data"][0]["cost_usd"] == 0.0112


def test_a_run_without_usage_reads_null(client: TestClient) -> None:
    rid = store(client, "plain", NO_USAGE)
    u = client.get(f"/api/runs/{rid}/figures").json()["usage"]
    assert u["total_tokens"] is None and u["cost_usd"] is None and u["trajectories_with_usage"] == 0
    assert client.get(f"/api/runs/{rid}").json()["total_tokens"] is None
    assert "Not recorded" in client.get(f"/runs/{rid}", headers=HTML).text


def test_a_run_with_tool_latency_only_gets_one_line_not_the_cards(client: TestClient) -> None:
    timed = {**NO_USAGE, "calls": [{**CLIENTE, "latency_ms": 2.0}, {**SALDO, "latency_ms": 8.0}]}
    rid = store(client, "mocked", timed)
    html = client.get(f"/runs/{rid}", headers=HTML).text
    line = section(html, "usage-none").text
    assert "no tokens and no cost" in line and "took 2 ms · 8 ms (p50 · p95)" in line, line
    assert 'id="usage-tokens"' not in html and 'id="usage-cost"' not in html


def test_the_trajectory_keeps_its_requests_and_latencies_and_exports_them(client: TestClient) -> None:
    rid = store(client, "u", PASSING, FAILING, NO_USAGE)
    page = client.get(f"/api/runs/{rid}/trajectories").json()["data"]
    failing = client.get(f"/api/trajectories/{page[1]['id']}").json()
    assert [c["latency_ms"] for c in failing["calls"]] == [80.0, 251.0]
    assert failing["calls"][1]["error"]["delay_ms"] == 250.0
    assert failing["model_calls"] == FAILING["model_calls"]
    assert failing["usage"] == {
        "requests": 1,
        "input_tokens": 4000,
        "output_tokens": 100,
        "cached_tokens": None,
        "total_tokens": 4100,
        "cost_usd": None,
        "priced": False,
        "model_latency_ms": 1500.0,
    }
    exported = [json.loads(x) for x in client.get(f"/api/runs/{rid}/trajectories.jsonl").text.splitlines()]
    assert exported == [PASSING, FAILING, NO_USAGE]  # what came in, key for key: nothing invented


def test_a_new_price_file_reprices_a_stored_run(client: TestClient, tmp_path: Path, monkeypatch) -> None:
    rid = store(client, "u", PASSING, FAILING)
    assert client.get(f"/api/runs/{rid}/figures").json()["usage"]["cost_usd"] == 0.0112
    prices = tmp_path / "prices.yaml"
    prices.write_text("date: '2026-12-01'\nmodels:\n  my-llama: {input: 1.0, output: 2.0}\n")
    monkeypatch.setenv("TOOLLENS_PRICES", str(prices))
    # 4000 * 1.0 + 100 * 2.0 = 4200 per million
    u = client.get(f"/api/runs/{rid}/figures").json()["usage"]
    assert u["cost_usd"] == pytest.approx(0.0112 + 0.0042) and u["prices_date"] == "2026-12-01"
    assert client.get(f"/api/runs/{rid}").json()["cost_usd"] == pytest.approx(0.0154)


class _Text(HTMLParser):
    """The text of the element with ``id``, and the widths of the latency bars."""

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted, self.depth, self.parts, self.bars = wanted, 0, [], []  # type: ignore[var-annotated]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self.depth or a.get("id") == self.wanted:
            self.depth += 1
        if tag == "rect" and self.depth:
            self.bars.append(a.get("width"))

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def section(html: str, wanted: str) -> _Text:
    p = _Text(wanted)
    p.feed(html)
    return p


def test_pages_show_cost_and_latency(client: TestClient) -> None:
    rid = store(client, "u", PASSING, FAILING, NO_USAGE)
    run = client.get(f"/runs/{rid}", headers=HTML).text
    assert "total 7,120 input 6,500 output 620 cached input 200 model requests 3" in section(run, "usage-tokens").text
    cost = section(run, "usage-cost").text
    assert "run $0.0112" in cost and "per trajectory $0.003733" in cost and "priced 1 of 2" in cost
    assert "no price for my-llama" in cost
    assert "model request 900 ms · 1500 ms tool call 80 ms · 251 ms" in section(run, "usage-latency").text
    assert "failed 1 4,100 4,100 —" in section(run, "usage-groups").text
    listed = section(run, "trajectory-list").text
    assert "3,020" in listed and "4,100" in listed  # the stored sums, per trajectory
    assert [t["total_tokens"] for t in client.get(f"/api/runs/{rid}/trajectories").json()["data"]] == [3020, 4100, None]
    runs = section(client.get("/", headers=HTML).text, "runs-table").text
    assert "7,120 $0.0112" in runs
    tid = client.get(f"/api/runs/{rid}/trajectories").json()["data"][1]["id"]
    timeline = section(client.get(f"/trajectories/{tid}", headers=HTML).text, "timeline")
    assert timeline.bars == ["31.9", "100.0"]  # 80 of the slowest call's 251 ms
    assert "251 ms (delay 250 ms)" in timeline.text
    usage = section(client.get(f"/trajectories/{tid}", headers=HTML).text, "model-calls").text
    assert "1 my-llama 4,000 — 100 — 1500 ms" in usage


def test_compare_lists_usage_deltas(client: TestClient) -> None:
    a = store(client, "a", PASSING)
    faster = copy.deepcopy(PASSING)
    for m in faster["model_calls"]:
        m["latency_ms"] /= 2
        m["input_tokens"] //= 2
    faster["model_calls"][0]["cached_tokens"] = 0
    b = store(client, "b", faster)
    deltas = {d["key"]: d for d in client.get("/api/compare", params={"a": a, "b": b}).json()["usage"]}
    assert deltas["tokens_per_trajectory"]["a"] == 3020 and deltas["tokens_per_trajectory"]["b"] == 1770
    # B: (500 * 2.50 + 500 * 10) / 10^6 + (750 * 2.50 + 20 * 10) / 10^6 = 0.00625 + 0.002075
    assert deltas["cost_per_trajectory"]["b"] == pytest.approx(0.008325)
    assert deltas["model_latency_p95"]["relative"] == -0.5
    assert "tool_latency_p50" in deltas and deltas["tool_latency_p50"]["delta"] == 0
    text = section(client.get("/compare", params={"a": a, "b": b}, headers=HTML).text, "usage-deltas").text
    assert "model latency p95 900 ms 450 ms −450 ms -50.0%" in text


def test_the_gate_checks_cost_and_latency_only_when_asked(db_url: str, tmp_path: Path) -> None:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        store(c, "base", PASSING)
        dearer = copy.deepcopy(PASSING)
        dearer["model_calls"][1]["output_tokens"] = 120  # +1000 tokens at $10 per million: +0.001, +8.9%
        dearer["calls"][0]["latency_ms"] = 300.0  # tool p95: 120 -> 300
        store(c, "cand", dearer)
    runner = CliRunner()
    base = ["gate", "--baseline", "base", "--candidate", "cand", "--db", db_url]
    assert runner.invoke(cli, base).exit_code == 0  # off by default
    config = tmp_path / "gate.yaml"
    config.write_text("tolerance:\n  cost_usd: +10%\n")
    out = runner.invoke(cli, [*base, "--config", str(config), "--markdown", str(tmp_path / "g.md")])
    assert out.exit_code == 0, out.output
    assert re.search(r"pass\s+cost per trajectory: 0\.0112 -> 0\.0122: \+8\.9%", out.output)
    config.write_text("tolerance:\n  cost_usd: +5%\n  tool_latency_p95: 0.5\n")
    out = runner.invoke(cli, [*base, "--config", str(config), "--markdown", str(tmp_path / "g.md")])
    assert out.exit_code == 1
    assert "regressed cost per trajectory" in out.output
    assert "regressed tool latency p95: 120 -> 300: +150.0%" in out.output
    md = (tmp_path / "g.md").read_text()
    assert "| tool latency p95 | 120 ms | 300 ms | +150.0% | increase <= 50% |" in md


def test_gate_usage_tolerances_are_read_strictly() -> None:
    cfg = parse_gate_config({"tolerance": {"cost_usd": "+10%", "model_latency_p95": 0.2}})
    assert cfg.usage == {"cost_usd": 0.1, "model_latency_p95": 0.2}
    assert parse_gate_config(None).usage == {}
    for bad in ("ten percent", "-5%", True, 500):
        with pytest.raises(GateConfigError, match=r"tolerance\.cost_usd: an allowed relative increase"):
            parse_gate_config({"tolerance": {"cost_usd": bad}})


def test_the_migration_adds_and_removes_the_usage_columns(tmp_path: Path) -> None:
    from alembic import command

    from app.store.db import _alembic_config

    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    engine = create_engine(url)
    cols = {c["name"] for c in inspect(engine).get_columns("trajectories")}
    assert {"model_calls", "input_tokens", "output_tokens", "cached_tokens", "total_tokens", "model_latency_ms"} <= cols
    assert {"latency_ms", "delay_ms"} <= {c["name"] for c in inspect(engine).get_columns("calls")}
    command.downgrade(_alembic_config(url), "0005")
    engine.dispose()
    engine = create_engine(url)
    assert "model_calls" not in {c["name"] for c in inspect(engine).get_columns("trajectories")}
    assert "latency_ms" not in {c["name"] for c in inspect(engine).get_columns("calls")}
    engine.dispose()


def test_otlp_model_spans_reach_the_figures(client: TestClient) -> None:
    from tests.otlp.test_otlp import TRACE, attr, body

    client.post("/api/runs", json={"name": "otlp", "suite": {**SUITE, "cases": []}})
    t0 = 1_700_000_000_000_000_000  # ns

    def timed(sid: str, parent: str, start_ms: float, end_ms: float, **attrs: Any) -> dict[str, Any]:
        return {
            "traceId": TRACE,
            "spanId": sid,
            "parentSpanId": parent,
            "name": sid,
            "startTimeUnixNano": str(t0 + int(start_ms * 1e6)),
            "endTimeUnixNano": str(t0 + int(end_ms * 1e6)),
            "attributes": [attr(k, v) for k, v in attrs.items()],
        }

    spans = body(
        timed(
            "01",
            "",
            0,
            3000,
            **{"toollens.case_id": "c-1", "gen_ai.operation.name": "invoke_agent", "gen_ai.usage.input_tokens": 5000},
        ),
        timed(
            "02",
            "01",
            10,
            910,
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 500,
            },
        ),
        timed(
            "03",
            "01",
            920,
            1040,
            **{
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "ver_saldo",
                "gen_ai.tool.call.arguments": '{"id": 8812}',
            },
        ),
        timed(
            "04",
            "01",
            1050,
            1350,
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 1500,
                "gen_ai.usage.output_tokens": 20,
            },
        ),
    )
    assert client.post("/v1/traces", json=spans).status_code == 200
    client.app.state.otlp.store_ready(everything=True)  # type: ignore[attr-defined]
    u = client.get("/api/runs/1/figures").json()["usage"]
    # (1000 * 2.50 + 500 * 10) / 10^6 + (1500 * 2.50 + 20 * 10) / 10^6 = 0.0075 + 0.00395; the agent span's 5000
    # input tokens (its requests' sum) are not counted again
    assert (u["input_tokens"], u["output_tokens"], u["cost_usd"]) == (2500, 520, 0.01145)
    assert u["model_latency_ms"] == {"p50": 300.0, "p95": 900.0} and u["tool_latency_ms"]["p50"] == 120.0
