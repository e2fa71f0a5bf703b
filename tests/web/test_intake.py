"""Hostile requests against a real `toollens serve` process over real HTTP:
each is refused before its body is read or built (400/401/413/415 naming the
limit), and `/api/health` keeps answering within 100 ms meanwhile."""

from __future__ import annotations

import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.core.suites.suite import load_suite_document
from app.otlp.bounds import MAX_JSON_VALUES, MAX_SPANS
from app.web.limits import allowed_hosts
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
TOOLLENS = str(Path(sys.executable).with_name("toollens"))
TOKEN = "intake-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`toollens serve` on a fresh SQLite file, with a token, on a free port."""
    db = f"sqlite:///{tmp_path_factory.mktemp('intake') / 'intake.db'}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TOOLLENS_ALLOWED_HOSTS"}  # the default: loopback + --host
    env["TOOLLENS_API_TOKEN"] = TOKEN
    proc = subprocess.Popen(
        [TOOLLENS, "serve", "--db", db, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("toollens serve did not come up")
            time.sleep(0.2)
        doc = load_suite_document(ROOT / "examples" / "suite_v1.yaml")
        assert httpx.post(f"{base}/api/runs", json={"name": "otlp", "suite": doc}, headers=AUTH).status_code == 201
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _otlp_json_empty_spans(n: int) -> bytes:
    return b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * n) + b"]}]}]}"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _otlp_protobuf_empty_spans(n: int) -> bytes:
    """ExportTraceServiceRequest{resource_spans: [{scope_spans: [{spans: n empty spans}]}]}, on the wire."""
    scope = b"\x12\x00" * n  # ScopeSpans.spans (field 2), each an empty Span
    resource = b"\x12" + _varint(len(scope)) + scope  # ResourceSpans.scope_spans (field 2)
    return b"\x0a" + _varint(len(resource)) + resource  # ExportTraceServiceRequest.resource_spans (field 1)


def _big_json() -> bytes:
    big = b'{"trajectories": [' + b",".join([b'{"case_id": "c", "answer": "' + b"x" * 1000 + b'"}'] * 62_000) + b"]}"
    assert len(big) > 63_000_000
    return big


def _gzipped(make: Callable[[], bytes], limit: int) -> Callable[[], bytes]:
    def build() -> bytes:
        body = gzip.compress(make(), 9)
        assert len(body) < limit
        return body

    return build


_GZ_JSON = {"content-type": "application/json", "content-encoding": "gzip", **AUTH}
# name -> (headers, the body's maker: each case builds only its own, the status it must get, a word of the refusal)
HOSTILE: dict[str, tuple[dict[str, str], Callable[[], bytes], int, str]] = {
    "63 MB JSON, no token": ({"content-type": "application/json"}, _big_json, 401, "bearer token"),
    "gzip JSON, 2 million empty spans": (
        _GZ_JSON,
        _gzipped(lambda: _otlp_json_empty_spans(2_000_000), 8_000),
        413,
        f"{MAX_JSON_VALUES} JSON values",
    ),
    "gzip JSON, 20 million empty spans": (
        _GZ_JSON,
        _gzipped(lambda: _otlp_json_empty_spans(20_000_000), 80_000),
        413,
        f"{MAX_JSON_VALUES} JSON values",
    ),
    "gzip protobuf, 2 million empty spans": (
        {"content-type": "application/x-protobuf", "content-encoding": "gzip", **AUTH},
        _gzipped(lambda: _otlp_protobuf_empty_spans(2_000_000), 8_000),
        413,
        f"more than {MAX_SPANS} spans",
    ),
}


ATTACK = r"""
import json, sys, time
import httpx
url, headers, path, seconds = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
body = open(path, "rb").read()
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        r = httpx.post(url, content=body, headers=headers, timeout=60)
        print(json.dumps([r.status_code, r.text]), flush=True)
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        print(json.dumps(None), flush=True)  # closed while the body was still being sent: answered unread
"""


@pytest.mark.parametrize("name", list(HOSTILE))
def test_health_answers_within_100_ms_while_a_hostile_body_is_refused(server: str, name: str, tmp_path: Path) -> None:
    headers, make, status, words = HOSTILE[name]
    (tmp_path / "body").write_bytes(make())
    path = "/api/runs/1/trajectories" if status == 401 else "/v1/traces?run=otlp"
    # two attackers in processes of their own: this process only measures
    attackers = [
        subprocess.Popen(
            [sys.executable, "-c", ATTACK, server + path, json.dumps(headers), str(tmp_path / "body"), "4"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        latencies = _health_latencies(server, lambda: any(a.poll() is None for a in attackers), wait=0.5)
    finally:
        outputs = [a.communicate(timeout=120)[0] for a in attackers]
    answers = [json.loads(line) for out in outputs for line in out.splitlines()]
    answered = [a for a in answers if a is not None]
    assert answered, "every hostile request lost its connection: no refusal was read"
    for code, text in answered:
        assert code == status and words in json.loads(text)["error"], text
    end = time.monotonic() + 2
    quiet = _health_latencies(server, lambda: time.monotonic() < end)  # the machine's own noise, for the record
    median, p90 = statistics.median(latencies), latencies[int(len(latencies) * 0.9)]
    print(
        f"{name}: {len(answers)} refused; health median {median * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms over {len(latencies)} requests (unattacked: median "
        f"{statistics.median(quiet) * 1000:.1f} ms, p90 {quiet[int(len(quiet) * 0.9)] * 1000:.1f} ms)"
    )
    # 100 ms, plus what the machine adds to an unattacked request (it is shared and often loaded)
    allowance = 0.100 + quiet[int(len(quiet) * 0.9)]
    assert median < 0.100 and p90 < allowance, f"health median {median * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms"


def _health_latencies(server: str, go_on: Callable[[], bool], wait: float = 0.0) -> list[float]:
    """Seconds per ``GET /api/health`` while ``go_on()``, sorted."""
    latencies: list[float] = []
    with httpx.Client(base_url=server, timeout=10) as health:
        time.sleep(wait)
        while go_on():
            t0 = time.perf_counter()
            assert health.get("/api/health").status_code == 200
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.01)
    return sorted(latencies)


def _read_response(s: socket.socket) -> str:
    """The whole answer (head and body: they may come in separate segments)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def test_a_real_server_refuses_hosts_types_and_sizes_before_the_body(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    for host in ("localhost", f"localhost:{port}", "127.0.0.1", f"[::1]:{port}"):
        assert httpx.get(f"{server}/api/health", headers={"Host": host}).status_code == 200, host
    r = httpx.get(f"{server}/api/health", headers={"Host": "rebound.example.com"})
    assert r.status_code == 400 and "TOOLLENS_ALLOWED_HOSTS" in r.json()["error"]
    # a page elsewhere POSTing text/plain (no preflight) cannot inject traces
    r = httpx.post(f"{server}/v1/traces?run=otlp", content=b"{}", headers={"content-type": "text/plain", **AUTH})
    assert r.status_code == 415 and "application/x-protobuf" in r.json()["error"]
    r = httpx.post(f"{server}/api/runs", content=b"{}", headers={"content-type": "text/plain", **AUTH})
    assert r.status_code == 415
    for path, kind in [("/api/runs", "application/json"), ("/trajectories/1/label", "text/plain")]:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:  # a gigabyte declared, none sent
            s.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: {kind}\r\nContent-Length: 1000000000\r\n\r\n".encode()
            )
            head = _read_response(s)
        assert head.startswith("HTTP/1.1 413") and "TOOLLENS_MAX_BODY_BYTES" in head, (path, head)
    r = httpx.get(f"{server}/api/health")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["referrer-policy"] == "no-referrer"


def test_options_and_405_list_every_method_of_the_path(server: str) -> None:
    r = httpx.options(f"{server}/api/runs")
    assert (r.status_code, r.headers["allow"]) == (204, "GET, OPTIONS, POST")
    r = httpx.put(f"{server}/api/runs", headers=AUTH)
    assert (r.status_code, r.headers["allow"]) == (405, "GET, OPTIONS, POST")
    assert httpx.options(f"{server}/api/runs/1/trajectories").headers["allow"] == "GET, OPTIONS, POST"
    assert httpx.options(f"{server}/no/such/path").status_code == 404
    assert httpx.get(f"{server}/no/such/path").status_code == 404


def test_allowed_hosts_default_to_loopback_and_the_listening_interface() -> None:
    assert allowed_hosts("", "10.1.2.3") == {"localhost", "127.0.0.1", "::1", "10.1.2.3"}
    assert allowed_hosts("", "[::1]") == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts(" toollens.example.com , app:8000 ") == {"toollens.example.com", "app"}
