"""MCP, driven with the official ``mcp`` SDK client: ``toollens toolset
import-mcp`` snapshots a live server word for word (stdio and streamable
HTTP), and ``toollens mcp-serve`` serves a case's mocked tools, recording
every call as a trajectory (stdio subprocess, HTTP on a loopback port), with
nothing lost when the client disconnects or the server dies."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import create_engine, select
from typer.testing import CliRunner

from app.cli import cli
from app.core.suites.suite import load_suite, load_toolset
from app.store.models import LivePending, Run, ToolsetVersion, TrajectoryRow
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SUITE = str(EXAMPLES / "suite_v2.yaml")
TOOLLENS = [sys.executable, "-m", "app.cli"]
runner = CliRunner()

FIXTURE_SERVER = """
import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="consultar_póliza", description="Devuelve la póliza «vigente» por su número (POL-0001).\\n"
               "NO sirve para siniestros: usa abrir_siniestro.",
               input_schema={"type": "object", "$defs": {"num": {"type": "string", "pattern": "^POL-\\\\d{4}$"}},
                             "properties": {"numero": {"$ref": "#/$defs/num"}}, "required": ["numero"]}),
    types.Tool(name="abrir_siniestro", description=None,
               input_schema={"type": "object", "properties": {"fecha": {"type": "string", "format": "date"}}}),
]

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)

async def main():
    server = Server("fixture", on_list_tools=list_tools)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""


def rows(url: str, *columns: Any, where: Any = None) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        q = select(*columns)
        result = [tuple(r) for r in conn.execute(q if where is None else q.where(where)).all()]
    engine.dispose()
    return result


def exported(url: str, run: str) -> list[dict[str, Any]]:
    r = runner.invoke(cli, ["export", run, "--out", "-", "--db", url])
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    upgrade(url)
    return url


def serve_http(
    url: str,
    port: int,
    case: str,
    run: str,
    *extra: str,
    prefix: tuple[str, ...] = (),
    wait: float = 30,
    suite: str = SUITE,
) -> subprocess.Popen[str]:
    """``mcp-serve`` over HTTP (behind ``prefix``, e.g. ``unshare``), once its port answers."""
    proc = subprocess.Popen(
        [
            *prefix,
            *TOOLLENS,
            "mcp-serve",
            suite,
            "--case",
            case,
            "--transport",
            "http",
            "--port",
            str(port),
            "--run",
            run,
            "--db",
            url,
            *extra,
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(proc.communicate()[1]) from None
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the MCP server did not start in {wait:.0f} s")


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate()


# -- toolset import-mcp -------------------------------------------------------------


def test_import_mcp_over_stdio_is_word_for_word(tmp_path: Path, sqlite_url: str) -> None:
    server = tmp_path / "server.py"
    server.write_text(FIXTURE_SERVER)
    out = tmp_path / "snapshot.yaml"
    r = runner.invoke(
        cli,
        [
            "toolset",
            "import-mcp",
            "--command",
            f"{sys.executable} {server}",
            "--name",
            "seguros",
            "--label",
            "prod",
            "--out",
            str(out),
            "--db",
            sqlite_url,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "toolset seguros version" in r.stderr and "(2 tools): added" in r.stderr
    [(label, tools)] = rows(sqlite_url, ToolsetVersion.label, ToolsetVersion.tools)
    assert label == "prod"
    assert tools == [
        {
            "name": "consultar_póliza",
            "description": "Devuelve la póliza «vigente» por su número (POL-0001).\n"
            "NO sirve para siniestros: usa abrir_siniestro.",
            "parameters": {
                "type": "object",
                "$defs": {"num": {"type": "string", "pattern": "^POL-\\d{4}$"}},
                "properties": {"numero": {"$ref": "#/$defs/num"}},
                "required": ["numero"],
            },
        },
        {
            "name": "abrir_siniestro",
            "description": "",
            "parameters": {"type": "object", "properties": {"fecha": {"type": "string", "format": "date"}}},
        },
    ]
    assert load_toolset(out).version == rows(sqlite_url, ToolsetVersion.hash)[0][0]
    # a second snapshot of the unchanged server is the same version
    r = runner.invoke(
        cli,
        ["toolset", "import-mcp", "--command", f"{sys.executable} {server}", "--name", "seguros", "--db", sqlite_url],
    )
    assert r.exit_code == 0 and "exists already (label 'prod')" in r.stderr


def test_import_mcp_over_http_round_trips_the_mocked_contract(sqlite_url: str, stop: list[Any]) -> None:
    port = free_port()
    stop.append(serve_http(sqlite_url, port, "saldo-001", "served"))
    r = runner.invoke(
        cli,
        [
            "toolset",
            "import-mcp",
            "--url",
            f"http://127.0.0.1:{port}/mcp",
            "--name",
            "atencion_cliente",
            "--label",
            "snap",
            "--db",
            sqlite_url,
        ],
    )
    assert r.exit_code == 0, r.output
    # mcp-serve showed the suite's tools exactly: the snapshot is the very version the suite declares
    v2 = load_toolset(EXAMPLES / "toolset_v2.yaml")
    hashes = {h for (h,) in rows(sqlite_url, ToolsetVersion.hash)}
    assert v2.version in hashes and len(hashes) == 1


def test_import_mcp_bad_input(sqlite_url: str) -> None:
    r = runner.invoke(cli, ["toolset", "import-mcp", "--name", "x", "--db", sqlite_url])
    assert r.exit_code == 2 and "exactly one of --command or --url" in r.stderr
    r = runner.invoke(
        cli,
        [
            "toolset",
            "import-mcp",
            "--command",
            "/nonexistent/server",
            "--name",
            "x",
            "--timeout",
            "5",
            "--db",
            sqlite_url,
        ],
    )
    assert r.exit_code == 2 and "cannot list tools" in r.stderr
    assert rows(sqlite_url, ToolsetVersion.id) == []


# -- mcp-serve ----------------------------------------------------------------------


async def _drive_stdio(url: str, errlog: Any) -> tuple[list[dict[str, Any]], list[tuple[bool, str]]]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        args=[
            "-m",
            "app.cli",
            "mcp-serve",
            SUITE,
            "--case",
            "saldo-001",
            "--run",
            "stdio-run",
            "--model",
            "sdk",
            "--faults",
            "tool:ver_saldo=http_503,clear",
            "--db",
            url,
        ],
    )
    results = []
    async with Client(stdio_client(params, errlog=errlog)) as client:  # server stderr to a real file
        listed = (await client.list_tools()).tools
        tools = [{"name": t.name, "description": t.description, "parameters": t.input_schema} for t in listed]
        for name, args in [
            ("buscar_cliente", {"rut": "12345678-9"}),
            ("ver_saldo", {"id": "8812"}),
            ("ver_saldo", {"id": 8812}),
            ("ver_saldo", {"id": 8812}),
            ("cancelar_pedido", {}),
        ]:
            res = await client.call_tool(name, args)
            results.append((res.is_error, res.content[0].text))  # type: ignore[union-attr]
    return tools, results


def test_mcp_serve_stdio_records_every_call(db_url: str, tmp_path: Path) -> None:
    with (tmp_path / "server.err").open("w") as errlog:
        tools, results = anyio.run(_drive_stdio, db_url, errlog)
    assert (
        "run 1 (stdio-run): stored 0 more trajectories at shutdown; run finished"
        in (tmp_path / "server.err").read_text()
    )
    assert tools == [t.contract() for t in load_suite(SUITE).toolset]  # names, descriptions, schemas: the same
    assert results == [
        (False, '{"id": 8812, "nombre": "Ana Rojas", "segmento": "personas"}'),
        (True, "ERROR: invalid arguments: field 'id': expected integer, got string '8812'"),
        (True, "ERROR 503: service unavailable"),  # the fault plan: ver_saldo fails, clears on retry
        (False, '{"id": 8812, "saldo": 142900, "moneda": "CLP"}'),
        (True, "ERROR: tool 'cancelar_pedido' does not exist"),
    ]
    [(status, model, config)] = rows(db_url, Run.status, Run.model, Run.config)
    assert (status, model, config["faults"]) == ("finished", "sdk", "tool:ver_saldo=http_503,clear")
    assert rows(db_url, LivePending.key) == [] and "live_pending" not in config  # nothing left pending
    [record] = exported(db_url, "stdio-run")
    assert [(c["name"], (c["error"] or {}).get("kind")) for c in record["calls"]] == [
        ("buscar_cliente", None),
        ("ver_saldo", "schema"),
        ("ver_saldo", "http_503"),
        ("ver_saldo", None),
        ("cancelar_pedido", "unknown_tool"),
    ]
    assert (record["case_id"], record["trial"], record["fault"]) == ("saldo-001", 0, {"step": 2, "kind": "http_503"})
    [(failures,)] = rows(db_url, TrajectoryRow.failures)
    assert "hallucinated_tool" in failures


async def _legacy_session(url: str) -> None:
    from mcp import Client

    async with Client(url, mode="legacy") as client:  # a legacy-era session: Mcp-Session-Id, DELETE at the end
        await client.call_tool("buscar_producto", {"consulta": "PED-12345"})


async def _modern_calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    from mcp import Client

    async with Client(url) as client:
        for name, args in calls:
            await client.call_tool(name, args)


def test_mcp_serve_http_sessions_answers_and_shutdown(sqlite_url: str, stop: list[Any]) -> None:
    port = free_port()
    proc = serve_http(sqlite_url, port, "pedido-001", "http-run")
    stop.append(proc)
    url = f"http://127.0.0.1:{port}/mcp"
    anyio.run(_legacy_session, url)
    # the session ended (DELETE): its trajectory is stored while the server keeps serving
    assert rows(sqlite_url, TrajectoryRow.trial, TrajectoryRow.n_calls, TrajectoryRow.failures) == [
        (0, 1, ["selection"])
    ]
    anyio.run(_modern_calls, url, [("buscar_pedido", {"numero": "PED-12345"})])
    answer = "Tu pedido PED-12345 fue despachado el 2024-03-05."
    end = httpx.post(f"http://127.0.0.1:{port}/toollens/end", json={"answer": answer}, timeout=10)
    assert end.json() == {"stored": 1}
    assert (
        httpx.post(
            f"http://127.0.0.1:{port}/toollens/end",
            content=b"[1]",
            timeout=10,
            headers={"content-type": "application/json"},
        ).status_code
        == 422
    )
    anyio.run(_modern_calls, url, [("buscar_pedido", {"numero": "PED-1"})])  # left open until shutdown
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stored 1 more trajectories at shutdown; run finished" in err
    records = exported(sqlite_url, "http-run")
    assert [(r["trial"], r["answer"], [c["name"] for c in r["calls"]]) for r in records] == [
        (0, "", ["buscar_producto"]),
        (1, answer, ["buscar_pedido"]),
        (2, "", ["buscar_pedido"]),
    ]
    assert records[2]["calls"][0]["error"]["kind"] == "schema"
    assert rows(sqlite_url, Run.status) == [("finished",)]


async def _two_turns(url: str, base: str) -> list[bool]:
    """One client session across two user turns, the turn boundary sent by the harness."""
    from mcp import Client

    async with Client(url) as client, httpx.AsyncClient(base_url=base, timeout=10) as harness:
        await client.call_tool("buscar_cliente", {"rut": "12345678-9"})
        await client.call_tool("verificar_compra", {"id": 8812, "numero": "PED-12345"})
        for role, content in (
            ("assistant", "¿Confirmas la nota de crédito?"),
            ("user", "Sí, confirmo: emite la nota de crédito."),
        ):
            assert (await harness.post("/toollens/message", json={"role": role, "content": content})).json() == {
                "recorded": True
            }
        errors = []
        for _ in range(2):
            result = await client.call_tool("emitir_nota_credito", {"id": 8812, "monto": 45990, "motivo": "doble"})
            errors.append(result.is_error)
        assert (await harness.post("/toollens/end", json={"answer": "Listo: NC-40021."})).json() == {"stored": 1}
    return errors


def test_one_session_is_one_conversation_with_the_turns_a_harness_reports(sqlite_url: str, stop: list[Any]) -> None:
    port = free_port()
    proc = serve_http(
        sqlite_url,
        port,
        "conv-nota-002",
        "conv",
        "--faults",
        "turn:2,index:0=http_503",
        suite=str(EXAMPLES / "conversaciones_v2.yaml"),
    )
    stop.append(proc)
    base = f"http://127.0.0.1:{port}"
    nobody = httpx.post(f"{base}/toollens/message", json={"role": "user", "content": "hola"}, timeout=10)
    assert nobody.status_code == 409 and "send the trajectory key" in nobody.json()["error"]
    assert (
        httpx.post(f"{base}/toollens/message", json={"role": "system", "content": "x"}, timeout=10).status_code == 422
    )
    assert anyio.run(_two_turns, f"{base}/mcp", base) == [True, False]  # turn 2's first call failed, not call 0
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    [record] = exported(sqlite_url, "conv")
    assert [(c["name"], (c["error"] or {}).get("kind")) for c in record["calls"]] == [
        ("buscar_cliente", None),
        ("verificar_compra", None),
        ("emitir_nota_credito", "http_503"),
        ("emitir_nota_credito", None),
    ]
    assert record["fault"] == {"step": 2, "kind": "http_503"} and record["answer"] == "Listo: NC-40021."
    question = load_suite(EXAMPLES / "conversaciones_v2.yaml").case("conv-nota-002").question  # type: ignore[union-attr]
    assert record["messages"] == [
        {"role": "user", "content": question, "calls_before": 0},
        {"role": "assistant", "content": "¿Confirmas la nota de crédito?", "calls_before": 2},
        {"role": "user", "content": "Sí, confirmo: emite la nota de crédito.", "calls_before": 2},
    ]


def test_nothing_is_lost_when_the_server_dies(sqlite_url: str, stop: list[Any]) -> None:
    port = free_port()
    proc = serve_http(sqlite_url, port, "saldo-001", "killed", "--faults", "index:1=timeout")
    stop.append(proc)
    anyio.run(
        _modern_calls,
        f"http://127.0.0.1:{port}/mcp",
        [("buscar_cliente", {"rut": "12345678-9"}), ("ver_saldo", {"id": 8812})],
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert rows(sqlite_url, TrajectoryRow.id) == []
    [(status, config)] = rows(sqlite_url, Run.status, Run.config)
    [(key, pending)] = rows(sqlite_url, LivePending.key, LivePending.record)
    [(server, identity)] = config["live_servers"].items()  # a random id, never host or PID, keys the record
    assert re.fullmatch(rf"con:127\.0\.0\.1:\d+@{server}", key) and re.fullmatch("[0-9a-f]{16}", server)
    assert (identity["host"], identity["pid"]) == (socket.gethostname(), proc.pid)
    assert status == "running" and [c["name"] for c in pending["calls"]] == ["buscar_cliente", "ver_saldo"]
    # the next start with the same run stores what was pending (stdin closed: it serves nothing and stops)
    done = subprocess.run(
        [*TOOLLENS, "mcp-serve", SUITE, "--case", "saldo-001", "--run", "killed", "--db", sqlite_url],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "stored 1 trajectories left pending by a stopped server" in done.stderr and done.stdout == ""
    [record] = exported(sqlite_url, "killed")
    assert record["fault"] == {"step": 1, "kind": "timeout"}
    assert record["calls"][1]["observation"] == "ERROR: timeout: the tool did not answer in time"


def test_mcp_serve_bad_input(sqlite_url: str) -> None:
    r = runner.invoke(cli, ["mcp-serve", SUITE, "--case", "nope", "--db", sqlite_url])
    assert r.exit_code == 2 and "no case 'nope'" in r.stderr
    r = runner.invoke(cli, ["mcp-serve", SUITE, "--case", "saldo-001", "--faults", "index:1=boom", "--db", sqlite_url])
    assert r.exit_code == 2 and "unknown fault kind 'boom'" in r.stderr
    r = runner.invoke(cli, ["mcp-serve", SUITE, "--case", "saldo-001", "--transport", "sse", "--db", sqlite_url])
    assert r.exit_code == 2
    assert rows(sqlite_url, Run.id) == []


async def _parallel(url: str, errlog: Any) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    started: list[str] = []
    both = anyio.Event()

    async def one(rut: str, wait: float) -> None:
        params = StdioServerParameters(
            command=sys.executable,
            cwd=str(ROOT),
            args=["-m", "app.cli", "mcp-serve", SUITE, "--case", "saldo-002", "--run", "parallel", "--db", url],
        )
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.call_tool("buscar_cliente", {"rut": rut})
            started.append(rut)
            if len(started) == 2:
                both.set()
            with anyio.fail_after(60):  # a server that starts slowly must not find the run finished already
                await both.wait()
            await anyio.sleep(wait)  # both servers hold an open trajectory at once; the first stops first
            await client.call_tool("ver_saldo", {"id": 5531})

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "9876543-K", 0.5)
        tg.start_soon(one, "9.876.543-K", 3.0)


def test_parallel_servers_share_a_run(db_url: str, tmp_path: Path) -> None:
    with (tmp_path / "servers.err").open("w") as errlog:
        anyio.run(_parallel, db_url, errlog)
    records = exported(db_url, "parallel")
    assert sorted(r["trial"] for r in records) == [0, 1]
    assert sorted(r["calls"][0]["arguments"]["rut"] for r in records) == ["9.876.543-K", "9876543-K"]
    [(status,)] = rows(db_url, Run.status)
    assert status == "finished" and rows(db_url, LivePending.key) == []
    err = (tmp_path / "servers.err").read_text()
    assert "run left open" in err and "run finished" in err  # the first to stop leaves it to the last
