"""``toollens import --format``: converted sources into the store, on SQLite
and PostgreSQL, with the store's bad-line rules (nothing half-stored)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select
from typer.testing import CliRunner

from app.cli import cli
from app.settings import Settings
from app.store.models import CallRow, Run, TrajectoryRow
from app.web.app import create_app
from tests.resources import DATA, shared_data

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
BFCL_IRRELEVANCE = DATA / "bfcl" / "BFCL_v4_irrelevance.json"
runner = CliRunner()

CHAT = {
    "id": "c1",
    "messages": [
        {"role": "user", "content": "Weather in Lima?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "Error: upstream timeout"},
        {"role": "assistant", "content": "I could not get the weather."},
    ],
}


def counts(url: str) -> tuple[int, int, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        out = tuple(int(conn.scalar(select(func.count()).select_from(m)) or 0) for m in (Run, TrajectoryRow, CallRow))
    engine.dispose()
    return out  # type: ignore[return-value]


@shared_data(TAU, SCHEMAS)
def test_tau_bench_imports_in_one_step(db_url: str) -> None:
    r = runner.invoke(
        cli,
        [
            "import",
            str(TAU),
            "--format",
            "tau-bench",
            "--tools",
            str(SCHEMAS),
            "--run",
            "tau",
            "--model",
            "gpt-4o",
            "--batch",
            "30",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "stored 100 trajectories, 621 calls; skipped 0 lines" in r.stderr
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run = client.get("/api/runs").json()["data"][0]
        assert (run["name"], run["toolset"], run["trajectories"]) == ("tau", "airline", 100)
        figures = client.get(f"/api/runs/{run['id']}/figures", params={"cases_limit": 1}).json()
    assert figures["pass_hat_k"] == {"1": 0.31, "2": 0.1933, "3": 0.17, "4": 0.16}
    assert figures["schema_validity"] == {"num": 621, "den": 621}
    assert sum(x["count"] for x in figures["reactions"]) == 63  # one reaction per tool error


def test_plain_traces_get_reference_free_metrics(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    other = {
        **CHAT,
        "id": "c2",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "x", "type": "function", "function": {"name": "get_wether", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "x", "content": "unknown tool"},
        ],
    }
    src.write_text(json.dumps(CHAT) + "\n" + json.dumps(other) + "\n")
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            {
                "tools": [
                    {
                        "name": "get_weather",
                        "description": "Weather for a city.",
                        "parameters": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        )
    )
    r = runner.invoke(
        cli, ["import", str(src), "--format", "openai-messages", "--tools", str(tools), "--run", "prod", "--db", db_url]
    )
    assert r.exit_code == 0, r.output
    assert "stored 2 trajectories, 2 calls" in r.stderr
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.get("/api/runs").json()["data"][0]["id"]
        f = client.get(f"/api/runs/{run_id}/figures").json()
    assert f["hallucinated_tools"] == {"num": 1, "den": 2}
    assert f["schema_validity"] == {"num": 1, "den": 1}
    assert f["selection_precision"] == {"num": 0, "den": 0, "no_reference": True}  # not computed, and said
    assert f["recovery"]["den"] == 1 and f["outcomes"]["gave_up"] == 1
    assert f["reactions"] == [
        {"error_kind": "error", "reaction": "gave_up", "acceptable": True, "count": 1},
        # the second conversation ends on the error, saying nothing
        {"error_kind": "unknown_tool", "reaction": "stopped", "acceptable": False, "count": 1},
    ]


def test_bad_lines_store_nothing_unless_skipped(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(json.dumps(CHAT) + "\n" + json.dumps({**CHAT, "id": "c2"}) + '\n{"messages": [')
    r = runner.invoke(cli, ["import", str(src), "--format", "openai-messages", "--run", "r", "--db", db_url])
    assert r.exit_code == 2
    assert "1 bad lines, nothing stored" in r.stderr
    assert "line 3: not valid JSON: Expecting value at the end of the line (truncated?)" in r.stderr
    assert counts(db_url) == (0, 0, 0)
    r = runner.invoke(
        cli, ["import", str(src), "--format", "openai-messages", "--run", "r", "--skip-bad", "--db", db_url]
    )
    assert r.exit_code == 0, r.output
    assert f"skipped {src}:3" in r.stderr and "stored 2 trajectories, 2 calls; skipped 1 lines" in r.stderr
    assert counts(db_url) == (1, 2, 2)


@shared_data(TAU, SCHEMAS, BFCL_IRRELEVANCE)
def test_truncated_array_and_unknown_format_store_nothing(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "tau.json"
    text = TAU.read_text()
    src.write_text(text[: len(text) // 2])
    r = runner.invoke(
        cli, ["import", str(src), "--format", "tau-bench", "--tools", str(SCHEMAS), "--run", "t", "--db", db_url]
    )
    assert r.exit_code == 2 and "truncated file" in r.stderr and "nothing stored" in r.stderr
    r = runner.invoke(cli, ["import", str(src), "--format", "langsmith", "--run", "t", "--db", db_url])
    assert r.exit_code == 2 and "unknown format 'langsmith'" in r.stderr
    r = runner.invoke(cli, ["import", str(BFCL_IRRELEVANCE), "--format", "bfcl", "--run", "t", "--db", db_url])
    assert r.exit_code == 2 and "holds questions, no runs" in r.stderr
    assert counts(db_url) == (0, 0, 0)


def test_repeated_import_is_refused_by_the_same_rules(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(json.dumps(CHAT) + "\n")
    args = ["import", str(src), "--format", "openai-messages", "--run", "r", "--keep-open", "--db", db_url]
    assert runner.invoke(cli, args).exit_code == 0
    r = runner.invoke(cli, args)
    assert r.exit_code == 2 and "case 'c1' trial 0 is stored already in this run" in r.stderr
    assert counts(db_url) == (1, 1, 1)
