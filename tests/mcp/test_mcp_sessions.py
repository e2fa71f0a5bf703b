"""mcp-serve review fixes: a per-session call limit answered with an MCP
error, pending trajectories flushed one by one (a bad one cannot fail the
others), a one-line report at shutdown, and a save that writes only its own
session's key."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from sqlalchemy import event

from app.commands.mcp import _shut_down
from app.core.errors import ToolLensError
from app.core.suites.suite import load_suite, load_suite_document
from app.mcp import serve
from app.mcp.serve import CaseRecorder, build_server
from app.store import live
from app.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from app.store.models import Run, TrajectoryRow
from tests.mcp.test_mcp import SUITE


@pytest.fixture()
def recorder(db_url: str) -> Iterator[CaseRecorder]:
    upgrade(db_url)
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    suite = load_suite(SUITE)
    with session_scope(sessions, write=True) as s:
        run_id = live.open_live_run(s, name="live", document=load_suite_document(SUITE)).id
    yield CaseRecorder(sessions, run_id, suite, suite.case("saldo-001"), None)  # type: ignore[arg-type]
    engine.dispose()


def test_calls_past_the_limit_get_an_mcp_error(recorder: CaseRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    monkeypatch.setattr(serve, "MAX_CALLS", 2)
    server = build_server(recorder, lambda ctx: "s1")

    async def drive() -> tuple[list[bool], str]:
        errors = []
        async with Client(server) as client:
            for _ in range(2):
                res = await client.call_tool("buscar_cliente", {"rut": "12345678-9"})
                errors.append(bool(res.is_error))
            with pytest.raises(MCPError) as refused:
                await client.call_tool("buscar_cliente", {"rut": "12345678-9"})
        return errors, str(refused.value)

    errors, message = anyio.run(drive)
    assert errors == [False, False]
    assert "made 2 calls, the most one trajectory holds" in message
    with session_scope(recorder.sessions) as s:
        (record,) = live.pending(s, recorder.run_id).values()
    assert len(record["calls"]) == 2  # the refused call was not recorded


def test_a_bad_pending_record_does_not_fail_the_others(
    recorder: CaseRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder.call("good", "buscar_cliente", {"rut": "12345678-9"})
    recorder.call("bad", "buscar_cliente", {"rut": "12345678-9"})
    with session_scope(recorder.sessions, write=True) as s:  # a record left by an older server: 5001 calls
        key = f"bad@{recorder.owner}"
        record = dict(live.pending(s, recorder.run_id)[key])
        record["calls"] = record["calls"] * 5001
        live.save_pending(s, recorder.run_id, key, record)
    assert recorder.end_all() == 1
    assert len(recorder.flush_errors) == 1 and "more than 5000 calls" in recorder.flush_errors[0]
    with session_scope(recorder.sessions) as s:
        assert [r.case_id for r in s.query(TrajectoryRow).where(TrajectoryRow.run_id == recorder.run_id)] == [
            "saldo-001"
        ]
        assert list(live.pending(s, recorder.run_id)) == [f"bad@{recorder.owner}"]  # kept, not lost
    # the command's shutdown: one line on stderr, exit 2, the run left open
    with pytest.raises(typer.Exit) as exit_:
        _shut_down(serve_console(), recorder, recorder.sessions, recorder.run_id, "live", keep_open=False)
    assert exit_.value.exit_code == 2
    err = capsys.readouterr().err
    assert "1 pending trajectories could not be stored and stay pending" in err and "Traceback" not in err
    with session_scope(recorder.sessions) as s:
        assert s.get(Run, recorder.run_id).status == "running"  # type: ignore[union-attr]


def serve_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def test_a_save_writes_only_its_own_sessions_key(recorder: CaseRecorder) -> None:
    recorder.call("other", "buscar_cliente", {"rut": "11111111-1"})
    sent: list[str] = []
    engine = recorder.sessions.kw["bind"]

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        sent.append(statement + json.dumps(parameters, default=lambda v: getattr(v, "obj", repr(v))))  # psycopg's Jsonb

    event.listen(engine, "before_cursor_execute", capture)
    try:
        recorder.call("mine", "buscar_cliente", {"rut": "22222222-2"})
        recorder.call("mine", "ver_saldo", {"id": 8812})
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert any("22222222-2" in x for x in sent)
    assert not any("11111111-1" in x for x in sent)  # the other session's record is neither read nor rewritten
    with session_scope(recorder.sessions) as s:
        waiting = live.pending(s, recorder.run_id)
    assert {k.split("@")[0]: [c["name"] for c in r["calls"]] for k, r in waiting.items()} == {
        "other": ["buscar_cliente"],
        "mine": ["buscar_cliente", "ver_saldo"],
    }
    assert recorder.end_all() == 2


ENDLESS_SERVER = """
import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    page = int((params.cursor if params else None) or 0)
    tool = types.Tool(name=f"t{page}", description="d", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool], next_cursor=str(page + 1))  # always one more page

async def main():
    server = Server("endless", on_list_tools=list_tools)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""


def test_a_snapshot_past_the_page_limit_is_refused_not_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.mcp import snapshot

    script = tmp_path / "endless.py"
    script.write_text(ENDLESS_SERVER)
    monkeypatch.setattr(snapshot, "MAX_PAGES", 3)
    with pytest.raises(ToolLensError) as refused:
        snapshot.snapshot_toolset(command=f"{sys.executable} {script}", name="x", timeout=30)
    assert "more than 3 pages of tools" in str(refused.value)


def test_import_mcp_writes_out_only_after_registering(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli
    from tests.mcp.test_mcp import FIXTURE_SERVER

    upgrade(url := f"sqlite:///{tmp_path / 'db.sqlite'}")
    server = tmp_path / "server.py"
    server.write_text(FIXTURE_SERVER)
    out = tmp_path / "snapshot.yaml"
    command = ["toolset", "import-mcp", "--command", f"{sys.executable} {server}", "--name", "seguros", "--db", url]
    r = CliRunner().invoke(cli, [*command, "--label", "x" * 101, "--out", str(out)])
    assert r.exit_code == 2 and "--label at most 100" in r.stderr
    assert not out.exists()  # registration failed: no file either
    r = CliRunner().invoke(cli, [*command, "--out", str(tmp_path / "missing" / "snapshot.yaml")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)  # a one-line error, not a traceback
    assert "FileNotFoundError" in r.stderr and "Traceback" not in r.stderr


def test_the_last_server_finishes_the_run_and_only_toollens_finish_seals_it(
    recorder: CaseRecorder, db_url: str
) -> None:
    from typer.testing import CliRunner

    from app.cli import cli
    from app.store.errors import Conflict

    recorder.register()
    other = CaseRecorder(recorder.sessions, recorder.run_id, recorder.suite, recorder.case, None)
    other.register()  # a second server of this very process: it runs
    recorder.call("s1", "buscar_cliente", {"rut": "12345678-9"})
    r = CliRunner().invoke(cli, ["finish", "live", "--db", db_url])
    assert r.exit_code == 2 and "2 mcp-serve servers still record into it" in r.stderr
    assert other.stop(finish=True) is False  # this recorder's server still runs: the run stays open
    assert recorder.end_all() == 1
    assert recorder.stop(finish=True) is True  # the last one finishes it
    with session_scope(recorder.sessions) as s:
        run = s.get(Run, recorder.run_id)
        assert run is not None and (run.status, run.config["finished_by"]) == ("finished", "mcp-serve")
    with session_scope(recorder.sessions, write=True) as s:  # the next server opens it again
        assert live.open_live_run(s, name="live", document=load_suite_document(SUITE)).status == "running"
    r = CliRunner().invoke(cli, ["finish", "live", "--db", db_url])
    assert r.exit_code == 0 and "(live): finished" in r.stderr
    with session_scope(recorder.sessions, write=True) as s, pytest.raises(Conflict, match="is finished"):
        live.open_live_run(s, name="live", document=load_suite_document(SUITE))


def test_a_registered_server_is_gone_when_its_pid_runs_another_process() -> None:
    me = serve.server_identity()
    assert serve.server_gone(me) is False
    assert serve.server_gone({**me, "start": str(int(me["start"]) + 1)}) is True  # same PID, another start
    assert serve.server_gone({**me, "boot": "another-boot"}) is True
    assert serve.server_gone({**me, "host": "elsewhere"}) is False  # cannot tell from here: left alone
    assert serve.server_gone({"host": me["host"]}) is True  # no PID recorded
