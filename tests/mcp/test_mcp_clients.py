"""``toollens mcp-serve`` with clients nobody here wrote and the ways real
clients and servers end: the MCP Inspector CLI (npm: one server per command),
the official Python ``mcp`` client over HTTP without a session id, sessions
that never call a tool, a port already taken, and a server killed with
SIGKILL and restarted with the same PID (PID 1 of a fresh PID namespace, as a
restarted container is)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.store.models import Run, ToolsetVersion
from tests.mcp.test_mcp import FIXTURE_SERVER, ROOT, SUITE, exported, rows, serve_http, sqlite_url, stop
from tests.servers import free_port

__all__ = ["sqlite_url", "stop"]  # fixtures shared with test_mcp
runner = CliRunner()
INSPECTOR_VERSION = "0.15.0"
INSPECTOR = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "mcp-inspector"


def _need(what: str, missing: str | None) -> None:
    """A resource the test needs: under CI a missing one fails the run, elsewhere the test skips, saying why."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: {what}: {missing}")
    pytest.skip(f"{what}: {missing}")


def _inspector() -> Path:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip(
            "the MCP Inspector CLI runs on Node.js, and this machine has no node/npm (Node.js is not a "
            "dependency of ToolLens; install it to run this test)"
        )
    _need(
        "the MCP Inspector CLI",
        None
        if INSPECTOR.is_file()
        else f"not installed: npm install --prefix .ci/node @modelcontextprotocol/inspector@{INSPECTOR_VERSION} "
        "(.ci/run does it)",
    )
    return INSPECTOR


def _inspect(url: str, *method: str) -> subprocess.CompletedProcess[str]:
    serve = [sys.executable, "-m", "app.cli", "mcp-serve", SUITE, "--case", "saldo-001", "--run", "insp", "--db", url]
    return subprocess.run(
        [str(_inspector()), "--cli", *serve, "--method", *method],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_inspector_cli_one_server_per_command(sqlite_url: str) -> None:
    """Each Inspector command starts and stops a server: each is a trajectory of the same run, the run is
    finished by each last server and opened again by the next, until ``toollens finish`` closes it."""
    first = _inspect(sqlite_url, "tools/call", "--tool-name", "buscar_cliente", "--tool-arg", "rut=12345678-9")
    assert first.returncode == 0, first.stderr
    assert '"text": "{\\"id\\": 8812, \\"nombre\\": \\"Ana Rojas\\", \\"segmento\\": \\"personas\\"}"' in first.stdout
    assert rows(sqlite_url, Run.status) == [("finished",)]
    listed = _inspect(sqlite_url, "tools/list")  # the next command: not "run is finished"
    assert listed.returncode == 0, listed.stderr
    assert '"name": "ver_saldo"' in listed.stdout
    records = exported(sqlite_url, "insp")
    assert [(r["trial"], [c["name"] for c in r["calls"]]) for r in records] == [
        (0, ["buscar_cliente"]),
        (1, []),
    ]  # a session that only listed the tools is a trajectory too
    r = runner.invoke(cli, ["finish", "insp", "--db", sqlite_url])
    assert r.exit_code == 0 and "run 1 (insp): finished" in r.stderr
    refused = _inspect(sqlite_url, "tools/list")
    assert refused.returncode != 0
    [(status, config)] = rows(sqlite_url, Run.status, Run.config)
    assert (status, config["finished_by"], config["live_servers"]) == ("finished", "toollens finish", {})
    assert len(exported(sqlite_url, "insp")) == 2


async def _sessions(url: str) -> None:
    from mcp import Client

    async with Client(url) as client:  # sends no session id: one connection, one trajectory
        await client.call_tool("buscar_cliente", {"rut": "12345678-9"})
        await client.call_tool("ver_saldo", {"id": 8812})
    async with Client(url) as client:
        await client.call_tool("buscar_cliente", {"rut": "9.876.543-K"})
    async with Client(url) as client:
        await client.list_tools()


def test_python_client_sessions_without_an_id(sqlite_url: str, stop: list[Any]) -> None:
    port = free_port()
    proc = serve_http(sqlite_url, port, "saldo-001", "sdk")
    stop.append(proc)
    base = f"http://127.0.0.1:{port}"
    # an answer with no call at all, before any session: the agent that invents an answer is stored
    invented = httpx.post(f"{base}/toollens/end", json={"answer": "Su saldo es 142900"}, timeout=30)
    assert invented.json() == {"stored": 1}
    anyio.run(_sessions, f"{base}/mcp")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stored 3 more trajectories at shutdown; run finished" in err
    records = exported(sqlite_url, "sdk")
    assert [(r["trial"], r["answer"], [c["name"] for c in r["calls"]]) for r in records] == [
        (0, "Su saldo es 142900", []),
        (1, "", ["buscar_cliente", "ver_saldo"]),
        (2, "", ["buscar_cliente"]),
        (3, "", []),
    ]


def test_a_port_already_taken_touches_no_run(sqlite_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = runner.invoke(
            cli,
            [
                "mcp-serve",
                SUITE,
                "--case",
                "saldo-001",
                "--transport",
                "http",
                "--port",
                str(port),
                "--run",
                "retry",
                "--db",
                sqlite_url,
            ],
        )
    assert r.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert rows(sqlite_url, Run.id) == []  # so a retry with the same --run is not refused


def _unshare_reason() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine (util-linux)"
    probe = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "1":
        return f"cannot make a PID namespace here (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()[:200]}"
    return None


def _serve_as_pid_1(url: str, port: int) -> subprocess.Popen[str]:
    """mcp-serve as PID 1 of a new PID namespace (killed with unshare if the test fails)."""
    return serve_http(
        url, port, "saldo-001", "ns", prefix=("unshare", "-p", "-f", "--kill-child", "--mount-proc"), wait=60
    )


def _server_of(unshare: subprocess.Popen[str]) -> int:
    """The server's PID as this test sees it (PID 1 inside its namespace)."""
    return int(Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()[0])


async def _calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    from mcp import Client

    async with Client(url) as client:
        for name, args in calls:
            await client.call_tool(name, args)


def test_a_killed_server_restarted_with_the_same_pid_loses_nothing(sqlite_url: str, stop: list[Any]) -> None:
    _need("a PID namespace", _unshare_reason())
    port = free_port()
    first = _serve_as_pid_1(sqlite_url, port)
    stop.append(first)
    anyio.run(_calls, f"http://127.0.0.1:{port}/mcp", [("buscar_cliente", {"rut": "12345678-9"})])
    [(config,)] = rows(sqlite_url, Run.config)
    [identity] = config["live_servers"].values()
    assert identity["pid"] == 1
    os.kill(_server_of(first), signal.SIGKILL)  # kill -9 the server itself
    first.communicate(timeout=60)
    second = _serve_as_pid_1(sqlite_url, port)  # the same host name, PID 1 again
    stop.append(second)
    anyio.run(_calls, f"http://127.0.0.1:{port}/mcp", [("ver_saldo", {"id": 8812})])
    os.kill(_server_of(second), signal.SIGTERM)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "stored 1 trajectories left pending by a stopped server" in err
    assert "stored 1 more trajectories at shutdown; run finished" in err
    records = exported(sqlite_url, "ns")
    assert [(r["trial"], [c["name"] for c in r["calls"]]) for r in records] == [
        (0, ["buscar_cliente"]),
        (1, ["ver_saldo"]),
    ]


SERVER_WITH_EXTRAS = FIXTURE_SERVER.replace(
    'types.Tool(name="abrir_siniestro", description=None,',
    'types.Tool(name="abrir_siniestro", description=None, title="Abrir siniestro", '
    "annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True), "
    'output_schema={"type": "object", "properties": {"folio": {"type": "string"}}},',
)


def test_snapshots_keep_title_annotations_and_output_schema(tmp_path: Path, sqlite_url: str) -> None:
    import yaml

    from app.core.suites.suite import load_toolset

    plain, extras = tmp_path / "plain.py", tmp_path / "extras.py"
    plain.write_text(FIXTURE_SERVER)
    extras.write_text(SERVER_WITH_EXTRAS)
    out = tmp_path / "snapshot.yaml"
    args = ["toolset", "import-mcp", "--name", "seguros", "--db", sqlite_url]
    r = runner.invoke(cli, [*args, "--command", f"{sys.executable} {plain}", "--label", "first"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, [*args, "--command", f"{sys.executable} {extras}", "--label", "second", "--out", str(out)])
    assert r.exit_code == 0, r.output
    # the version is what the model reads (name, description, input schema): the same, first label kept
    assert "exists already (label 'first')" in r.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["label"] == "first"
    siniestro = doc["tools"][1]
    assert (siniestro["title"], siniestro["annotations"], siniestro["output_schema"]) == (
        "Abrir siniestro",
        {"readOnlyHint": False, "destructiveHint": True},
        {"type": "object", "properties": {"folio": {"type": "string"}}},
    )
    assert load_toolset(out).version == rows(sqlite_url, ToolsetVersion.hash)[0][0]
    assert load_toolset(out).get("abrir_siniestro").destructive  # type: ignore[union-attr]
    # a new toolset name stores the extras with the version
    r = runner.invoke(
        cli,
        ["toolset", "import-mcp", "--name", "seguros2", "--command", f"{sys.executable} {extras}", "--db", sqlite_url],
    )
    assert r.exit_code == 0, r.output
    stored = dict(rows(sqlite_url, ToolsetVersion.toolset, ToolsetVersion.tools))["seguros2"]
    assert stored[1]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert "title" not in stored[0] and "annotations" not in stored[0]


async def _time_client(suite: Path, url: str, errlog: Any) -> tuple[list[Any], Any]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        args=["-m", "app.cli", "mcp-serve", str(suite), "--case", "now", "--run", "time", "--db", url],
    )
    async with Client(stdio_client(params, errlog=errlog)) as client:
        listed = (await client.list_tools()).tools
        result = await client.call_tool("get_current_time", {"timezone": "America/Santiago"})
    return listed, result


def test_the_mocked_server_shows_what_the_real_one_declares(tmp_path: Path, sqlite_url: str) -> None:
    """mcp-server-time's tools served by mcp-serve: annotations and output schema as the real server lists
    them, and a mocked answer that is a JSON object returned as the structured content the official client
    checks against the output schema (it raises without it)."""
    import json

    from tests.core.test_lint_mcp_servers import TIME

    real = json.loads(TIME.read_text())
    now = {
        "timezone": "America/Santiago",
        "datetime": "2026-10-19T09:30:00-03:00",
        "day_of_week": "Monday",
        "is_dst": True,
    }
    tools = [{**t, "mock": {"response": now}} if t["name"] == "get_current_time" else t for t in real["tools"]]
    suite = tmp_path / "time.json"
    suite.write_text(
        json.dumps(
            {
                "name": "time",
                "toolset": {"name": "time", "tools": tools},
                "cases": [
                    {
                        "id": "now",
                        "question": "What time is it in Santiago?",
                        "expected_calls": [{"name": "get_current_time", "arguments": {"timezone": "America/Santiago"}}],
                    }
                ],
            }
        )
    )
    with (tmp_path / "server.err").open("w") as errlog:
        listed, result = anyio.run(_time_client, suite, sqlite_url, errlog)
    served = {t.name: t for t in listed}
    get = served["get_current_time"]
    assert get.annotations.model_dump(by_alias=True, exclude_none=True) == real["tools"][0]["annotations"]
    assert get.output_schema == real["tools"][0]["outputSchema"] and get.title is None
    assert result.is_error is False and result.structured_content == now
    [record] = exported(sqlite_url, "time")
    assert [c["name"] for c in record["calls"]] == ["get_current_time"]
