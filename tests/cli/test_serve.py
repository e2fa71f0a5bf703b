"""What the Dockerfile and docker-compose run, run here outside Docker:
`toollens db upgrade && toollens serve`, then the healthcheck, over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLLENS = str(Path(sys.executable).with_name("toollens"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_upgrade_then_serve_answers_health(db_url: str) -> None:
    subprocess.run([TOOLLENS, "db", "upgrade", "--db", db_url], check=True, capture_output=True, timeout=120)
    port = free_port()
    proc = subprocess.Popen(
        [TOOLLENS, "serve", "--db", db_url, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as r:
                    assert json.load(r)["status"] == "ok"
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"server did not come up: {proc.stdout.read().decode() if proc.stdout else ''}")
                time.sleep(0.2)
        # the image's HEALTHCHECK command, pointed at this port
        dockerfile = (ROOT / "Dockerfile").read_text()
        check = dockerfile.split('CMD python -c "', 1)[1].split('"\n', 1)[0].replace(":8000", f":{port}")
        assert subprocess.run([sys.executable, "-c", check], timeout=10).returncode == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as r:
            assert json.load(r)["count"] == 0
        # a server starts the OTLP receiver's scoring worker with itself, not with the first burst of spans
        expected = True if (os.cpu_count() or 1) >= 2 else None
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/traces/status", timeout=5) as r:
                ready = json.load(r)["worker_ready"]
            if ready is expected or time.monotonic() > deadline + 30:
                break
            time.sleep(0.1)
        assert ready is expected
    finally:
        proc.terminate()
        proc.wait(timeout=10)
