"""Kills at the wrong moment, with real processes and real SIGKILL, on SQLite and PostgreSQL:
two `toollens serve` on one database streaming OTLP, one killed mid-burst (and a third that
cannot bind its port); a resend after a restart; `toollens import` killed mid-file; no
process left behind by a killed server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.otlp.test_otlp import SUITE, body, span
from tests.servers import free_port

TOOLLENS = str(Path(sys.executable).with_name("toollens"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Server:
    """A `toollens serve` process, its output in a file."""

    def __init__(self, db_url: str, port: int, log: Path, *, warm: bool = True):
        self.base, self.log = f"http://127.0.0.1:{port}", log
        self._out: IO[bytes] = log.open("ab")
        env = {**os.environ, **({} if warm else {"TOOLLENS_OTLP_WARM_START": "0"})}  # cold: a quicker start
        self.proc = subprocess.Popen(
            [TOOLLENS, "serve", "--db", db_url, "--port", str(port)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_up(self) -> Server:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.base}/api/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail(f"server did not come up: {self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._out.close()


@pytest.fixture()
def servers() -> Iterator[list[Server]]:
    """Servers started by a test; whatever is still running at its end is killed."""
    started: list[Server] = []
    yield started
    for s in started:
        s.kill()


def trace_ids(first: int, n: int) -> list[str]:
    return [f"{i:032x}" for i in range(first, first + n)]


def export(traces: list[str]) -> bytes:
    """One export request holding whole traces (a root and two tool calls each; the case id is the trace id)."""
    spans = []
    args = "gen_ai.tool.call.arguments"
    for t in traces:
        spans += [
            span(t, "01", "", 10, attrs={"toollens.case_id": t}),
            span(t, "02", "01", 20, tool="buscar_cliente", attrs={args: '{"rut": "1-9"}'}),
            span(t, "03", "01", 30, tool="ver_saldo", attrs={args: '{"id": 8812}'}),
        ]
    return json.dumps(body(*spans)).encode()


def post(base: str, data: bytes) -> bool:
    """Whether the receiver acknowledged the request."""
    try:
        r = httpx.post(
            f"{base}/v1/traces?run=otlp", content=data, headers={"content-type": "application/json"}, timeout=30
        )
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def stored(base: str, run_id: int) -> Counter[str]:
    """How many trajectories each case id has in the run."""
    r = httpx.get(f"{base}/api/runs/{run_id}/trajectories.jsonl", timeout=60)
    assert r.status_code == 200, r.text
    return Counter(json.loads(line)["case_id"] for line in r.text.splitlines())


def test_a_server_killed_mid_burst_beside_a_live_one_loses_nothing_and_stores_nothing_twice(
    db_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    a = Server(db_url, free_port(), tmp_path / "a.log")
    b = Server(db_url, free_port(), tmp_path / "b.log")
    servers += [a, b]
    a.wait_up(), b.wait_up()
    r = httpx.post(f"{b.base}/api/runs", json={"name": "otlp", "suite": SUITE}, timeout=30)
    assert r.status_code == 201, r.text
    run_id = int(r.json()["id"])
    acked: dict[str, bytes] = {}  # trace id -> the request that carried it (acknowledged)
    sent: set[str] = set()
    lock = threading.Lock()

    c_done = threading.Event()  # the third server has tried to start (a is alive until then)

    def burst(server: Server, first: int, requests: int, kill_after: bool = False) -> None:
        for i in range(requests):
            if kill_after and i == requests - 1:
                # a dies only after the third server's start: a dead server's batches are its to take
                c_done.wait(timeout=180)
            traces = trace_ids(first + 10 * i, 10)
            data = export(traces)
            with lock:
                sent.update(traces)
            if post(server.base, data):
                with lock:
                    acked.update(dict.fromkeys(traces, data))
        if kill_after:  # at once after its last acknowledgement: what it staged last is not stored yet
            server.proc.send_signal(signal.SIGKILL)

    to_b = threading.Thread(target=burst, args=(b, 1_000_000, 20))
    to_a = threading.Thread(target=burst, args=(a, 0, 20, True))
    to_b.start(), to_a.start()
    # a third server on the same database, started while both stream, cannot bind b's port:
    # its start must not take the live servers' staged requests
    c = Server(db_url, int(b.base.rsplit(":", 1)[1]), tmp_path / "c.log", warm=False)
    servers.append(c)
    try:
        assert c.proc.wait(timeout=120) != 0
    finally:
        c_done.set()
    assert "address already in use" in c.output() and "recovered" not in c.output()
    to_a.join(), to_b.join()
    a.kill()
    burst(b, 2_000_000, 2)  # b goes on receiving after a died
    deadline = time.monotonic() + 90
    while not set(acked) <= set(counts := stored(b.base, run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "recovered" in b.output()  # b took over what a staged and did not store
    assert {t for t in acked if counts[t] != 1} == set()  # every acknowledged trace: stored, once
    assert max(counts.values()) == 1 and set(counts) <= sent
    assert len(acked) >= 300

    # a restarted server gets every acknowledged request again (an exporter retrying after the
    # crash): the database knows those traces are stored, nothing is stored twice
    a2 = Server(db_url, int(a.base.rsplit(":", 1)[1]), tmp_path / "a2.log", warm=False).wait_up()
    servers.append(a2)
    resent = list({id(v): v for v in acked.values()}.values())
    for data in resent:
        assert post(a2.base, data)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = httpx.get(f"{a2.base}/v1/traces/status", timeout=10).json()
        if status["buffered_spans"] == 0 and status["duplicate_spans"] >= status["accepted_spans"] > 0:
            break
        time.sleep(0.5)
    assert (status["accepted_spans"], status["duplicate_spans"], status["stored_spans"]) == (
        30 * len(resent),
        30 * len(resent),
        0,
    )
    assert stored(a2.base, run_id) == counts


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds a process's children in /proc: run it on Linux")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the scoring worker needs two cores: run it on two or more")
def test_a_killed_server_leaves_no_process_behind(db_url: str, tmp_path: Path, servers: list[Server]) -> None:
    s = Server(db_url, free_port(), tmp_path / "s.log").wait_up()
    servers.append(s)
    deadline = time.monotonic() + 60
    while httpx.get(f"{s.base}/v1/traces/status", timeout=10).json()["worker_ready"] is not True:
        assert time.monotonic() < deadline, s.output()
        time.sleep(0.2)
    children = _children(s.proc.pid)
    assert len(children) >= 2, children  # the scoring worker and multiprocessing's resource tracker
    s.kill()
    deadline = time.monotonic() + 20
    while (left := [p for p in children if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []


def _big_file(path: Path, copies: int) -> int:
    """The example records, ``copies`` times over (each copy its own trials)."""
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
    n = 0
    with path.open("w") as fh:
        for k in range(copies):
            for line in lines:
                rec = json.loads(line)
                rec["trial"] = rec["trial"] + 10 * k
                fh.write(json.dumps(rec) + "\n")
                n += 1
    return n


def test_a_killed_import_leaves_nothing_and_the_file_imports_again(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    n = _big_file(src, 500)
    name = f"kill_{uuid.uuid4().hex[:8]}"
    url = f"{db_url}&application_name={name}" if db_url.startswith("postgresql") else db_url
    engine = create_engine(db_url)
    cmd = [TOOLLENS, "import", str(src), "--suite", str(EXAMPLES / "suite_v1.yaml"), "--run", "big", "--db"]
    proc = subprocess.Popen([*cmd, url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not _storing(engine, db_url, name):  # kill it once it has written a good part of the file
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with engine.connect() as conn:  # nothing of the file is visible, and no run is left "running"
        assert conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == 0
    done = subprocess.run([*cmd, db_url], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trajectories")).scalar_one() == n
        assert conn.execute(text("SELECT status FROM runs WHERE name = 'big'")).scalar_one() == "finished"
    engine.dispose()


def _storing(engine: Any, db_url: str, name: str) -> bool:
    """Whether the import has been writing for a while: SQLite's write-ahead log past 2 MB;
    PostgreSQL's import transaction writing for more than a second."""
    if db_url.startswith("sqlite"):
        wal = Path(db_url.removeprefix("sqlite:///") + "-wal")
        return wal.is_file() and wal.stat().st_size > 2 << 20
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND backend_xid IS NOT NULL "
                    "AND xact_start < now() - interval '1 second'"
                ),
                {"name": name},
            ).scalar_one()
        )
