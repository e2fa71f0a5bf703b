"""mcp-serve's side endpoints (``/toollens/end``, ``/toollens/message``) under the API's
rules, probed as the hardening review did, against a real ``mcp-serve`` process: a
foreign Host, another site's page, ``text/plain``, no token, a body past the bound (declared,
or streamed without a length); and a long conversation whose messages are appended, not
rewritten, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import signal
import socket
import statistics
import threading
import time
from typing import Any

import anyio
import httpx
import pytest

from app.store.models import Run
from tests.mcp.test_mcp import exported, rows, serve_http, sqlite_url, stop  # noqa: F401  (fixtures)
from tests.servers import free_port

TOKEN = "side-token-1234"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def raw_post(port: int, path: str, head: dict[str, str], chunks: list[bytes] = ()) -> tuple[int, bytes]:  # type: ignore[assignment]
    """A POST written by hand (a declared length it never sends, a chunked body); the status and body
    of the answer, read as soon as the server gives one."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        sock.sendall("\r\n".join(lines).encode())
        try:
            for chunk in chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:  # the server answered and closed before the rest was sent
            pass
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 20:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def test_side_endpoints_take_writes_as_the_api_does(
    sqlite_url: str,  # noqa: F811
    stop: list[Any],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLLENS_API_TOKEN", TOKEN)
    port = free_port()
    proc = serve_http(sqlite_url, port, "saldo-001", "side")
    stop.append(proc)
    base = f"http://127.0.0.1:{port}"
    auth = {"authorization": f"Bearer {TOKEN}"}
    forged = json.dumps({"trajectory": "t1", "answer": "forged"})

    # the review's probe: another site, through DNS rebinding, with text/plain (no preflight)
    r = httpx.post(
        f"{base}/toollens/end",
        content=forged,
        timeout=10,
        headers={"host": f"evil.example:{port}", "origin": "http://evil.example", "content-type": "text/plain"},
    )
    assert r.status_code == 400 and "evil.example" in r.json()["error"]
    # the right Host, but a page of another site: refused even with the token
    r = httpx.post(
        f"{base}/toollens/end",
        content=forged,
        timeout=10,
        headers={**auth, "origin": "http://evil.example", "content-type": "application/json"},
    )
    assert r.status_code == 403 and "same-origin" in r.json()["error"]
    r = httpx.post(
        f"{base}/toollens/message", content=forged, timeout=10, headers={**auth, "content-type": "text/plain"}
    )
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    r = httpx.post(f"{base}/toollens/end", json={"trajectory": "t1", "answer": "forged"}, timeout=10)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    # /mcp keeps its own Host check
    assert httpx.post(f"{base}/mcp", json={}, timeout=10, headers={"host": f"evil.example:{port}"}).status_code == 421

    # bounded bodies: a declared 300 MB is refused before a byte of it is read; one streamed
    # without a length is read up to the bound (2 MiB), and the server's memory stays put
    before = rss_mb(proc.pid)
    head = {"host": f"127.0.0.1:{port}", "content-type": "application/json", **auth}
    started = time.monotonic()
    status, body = raw_post(port, "/toollens/end", {**head, "content-length": str(300_000_000)})
    assert status == 413 and b"TOOLLENS_MCP_MAX_BODY_BYTES" in body and time.monotonic() - started < 5
    chunk = b'{"trajectory": "t1", "content": "' + b"x" * (1 << 20)
    status, body = raw_post(port, "/toollens/message", {**head, "transfer-encoding": "chunked"}, [chunk] * 40)
    assert status == 413 and b"2097152 bytes" in body
    assert rss_mb(proc.pid) - before < 30

    # what the rules let through is stored
    r = httpx.post(
        f"{base}/toollens/end", json={"trajectory": "t1", "answer": "Su saldo es 142900"}, headers=auth, timeout=10
    )
    assert r.json() == {"stored": 1}
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert [rec["answer"] for rec in exported(sqlite_url, "side")] == ["Su saldo es 142900"]


def _timed_calls(url: str, until: threading.Event, took: list[float]) -> None:
    """Another session calling a tool over and over while the harness talks (its latencies)."""

    async def go() -> None:
        from mcp import Client

        async with Client(url) as client:
            while not until.is_set():
                started = time.perf_counter()
                await client.call_tool("buscar_cliente", {"rut": "12345678-9"})
                took.append(time.perf_counter() - started)
                await anyio.sleep(0.05)

    anyio.run(go)


def test_a_message_is_appended_not_the_record_rewritten(db_url: str, stop: list[Any]) -> None:  # noqa: F811
    """250 messages of 100 KB to one trajectory while another session calls a tool: a
    message's cost does not grow with the conversation, the run's row stays small, the
    other session is not held up, and every message is stored, in order."""
    port = free_port()
    proc = serve_http(db_url, port, "saldo-001", "long-talk")
    stop.append(proc)
    base = f"http://127.0.0.1:{port}"
    until, calls = threading.Event(), []
    other = threading.Thread(target=_timed_calls, args=(f"{base}/mcp", until, calls))
    other.start()
    took = []
    try:
        with httpx.Client(base_url=base, timeout=30) as harness:
            for i in range(250):
                content = f"{i:04d}" + "é" * 50_000  # 100 KB of UTF-8
                started = time.perf_counter()
                r = harness.post(
                    "/toollens/message",
                    json={"trajectory": "long", "role": "user" if i % 2 else "assistant", "content": content},
                )
                took.append(time.perf_counter() - started)
                assert r.json() == {"recorded": True}, r.text
            [(config,)] = rows(db_url, Run.config)
            assert len(json.dumps(config)) < 20_000  # the messages are not in the run's row
            assert harness.post("/toollens/end", json={"trajectory": "long"}).json() == {"stored": 1}
    finally:
        until.set()
        other.join(60)
    first, last = statistics.median(took[:25]), statistics.median(took[-25:])
    print(
        f"\nper message: first 25 {first * 1000:.1f} ms, last 25 {last * 1000:.1f} ms; "
        f"other session's call: median {statistics.median(calls) * 1000:.1f} ms over {len(calls)}"
    )
    assert last < max(3 * first, 0.1)  # the 250th message costs what the first did (rewriting: 298 ms)
    assert len(calls) > 5 and statistics.median(calls) < 0.1  # (rewriting: 451 ms)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    long = [rec for rec in exported(db_url, "long-talk") if rec.get("messages")]
    assert len(long) == 1
    said = long[0]["messages"]
    assert len(said) == 251 and said[0]["role"] == "user"  # the case's question first
    assert [m["content"][:4] for m in said[1:]] == [f"{i:04d}" for i in range(250)]
    assert all(len(m["content"]) == 50_004 for m in said[1:])


def test_long_trajectory_keys_are_compared_whole(sqlite_url: str, stop: list[Any]) -> None:  # noqa: F811
    """Two harness keys that share their first 100 characters are two trajectories (they were cut to one)."""
    port = free_port()
    proc = serve_http(sqlite_url, port, "saldo-001", "keys")
    stop.append(proc)
    base = f"http://127.0.0.1:{port}"
    alice, bob = "s" * 100 + "-alice", "s" * 100 + "-bob"
    with httpx.Client(base_url=base, timeout=30) as harness:
        for key, said in ((alice, "soy alice"), (bob, "soy bob")):
            assert harness.post(
                "/toollens/message", json={"trajectory": key, "role": "user", "content": said}
            ).json() == {"recorded": True}
        assert harness.post("/toollens/end", json={"trajectory": alice, "answer": "a"}).json() == {"stored": 1}
        assert harness.post("/toollens/end", json={"trajectory": bob, "answer": "b"}).json() == {"stored": 1}
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    records = exported(sqlite_url, "keys")
    assert sorted((r["answer"], r["messages"][-1]["content"]) for r in records) == [
        ("a", "soy alice"),
        ("b", "soy bob"),
    ]
