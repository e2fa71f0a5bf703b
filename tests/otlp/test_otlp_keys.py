"""OTLP conversation keys compared whole, against a real `toollens serve` on SQLite and
PostgreSQL: values sharing their first 256 characters, and ``77`` beside ``"77"``, stay
apart; a conversation a SIGKILL interrupts continues, after the restart, as the same
trajectory (one trial, not two)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, select

from app.core.keys import whole_key
from app.store.models import Run, TrajectoryRow
from tests.otlp.test_otlp import SUITE, span
from tests.servers import free_port
from tests.store.test_kills import Server, servers  # noqa: F401  (fixture)

ARGS = "gen_ai.tool.call.arguments"


def resource_batch(value: Any, trace: int, start: int, tool: str = "buscar_cliente") -> bytes:
    """One tool span whose resource carries the conversation value (any OTLP type)."""
    kind = "intValue" if isinstance(value, int) else "stringValue"
    resource = {"attributes": [{"key": "session.id", "value": {kind: str(value) if kind == "intValue" else value}}]}
    one = span(f"{trace:032x}", f"{trace:016x}", "", start, tool=tool, attrs={ARGS: '{"rut": "1-9"}'})
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [one]}]}]}).encode()


def post(base: str, data: bytes) -> int:
    try:
        return httpx.post(
            f"{base}/v1/traces?run=talk&group_by=session.id",
            content=data,
            timeout=30,
            headers={"content-type": "application/json"},
        ).status_code
    except httpx.HTTPError:
        return 0


def trajectories(db_url: str) -> list[tuple[str, int, int]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            run_id = conn.scalar(select(Run.id).where(Run.name == "talk"))
            return sorted(
                (str(c), int(t), int(n))
                for c, t, n in conn.execute(
                    select(TrajectoryRow.case_id, TrajectoryRow.trial, TrajectoryRow.n_calls).where(
                        TrajectoryRow.run_id == run_id
                    )
                )
            )
    finally:
        engine.dispose()


def start(db_url: str, port: int, log: Path, servers: list[Server]) -> str:  # noqa: F811
    server = Server(db_url, port, log, warm=False)
    servers.append(server)
    return server.wait_up().base


def test_conversation_values_are_compared_whole(db_url: str, tmp_path: Path, servers: list[Server]) -> None:  # noqa: F811
    base = start(db_url, free_port(), tmp_path / "serve.log", servers)
    assert httpx.post(f"{base}/api/runs", json={"name": "talk", "suite": SUITE}, timeout=30).status_code == 201
    alice, bob = "s" * 256 + "-alice", "s" * 256 + "-bob"
    sent = [(alice, 2), (bob, 1), (77, 3), ("77", 1)]  # conversation value, calls
    trace = 0
    for value, calls in sent:
        for _ in range(calls):
            trace += 1
            assert post(base, resource_batch(value, trace, trace)) == 200
    servers[-1].proc.send_signal(signal.SIGTERM)
    assert servers[-1].proc.wait(timeout=60) in (0, -signal.SIGTERM)
    expected = sorted((whole_key(v, 256), 0, n) for v, n in sent)
    assert trajectories(db_url) == expected  # four trajectories: alice's holds none of bob's calls
    assert expected[0][0] == "77" and expected[1][0] == "77#int"
    assert {len(k) for k, _, _ in expected} <= {2, 6, 256}


def test_a_conversation_killed_midway_continues_as_one_trajectory(
    db_url: str,
    tmp_path: Path,
    servers: list[Server],  # noqa: F811
) -> None:
    port = free_port()
    base = start(db_url, port, tmp_path / "a.log", servers)
    assert httpx.post(f"{base}/api/runs", json={"name": "talk", "suite": SUITE}, timeout=30).status_code == 201
    for i in range(6):  # six calls of one conversation, each its own trace, acknowledged
        assert post(base, resource_batch("conv-kill", i + 1, 10 * i)) == 200
    servers[-1].proc.send_signal(signal.SIGKILL)
    servers[-1].proc.wait(timeout=30)
    base = start(db_url, port, tmp_path / "b.log", servers)
    for i in range(6, 12):  # the conversation goes on against the restarted server
        assert post(base, resource_batch("conv-kill", i + 1, 10 * i)) == 200
        time.sleep(0.2)
    servers[-1].proc.send_signal(signal.SIGTERM)
    assert servers[-1].proc.wait(timeout=60) in (0, -signal.SIGTERM), servers[-1].output()
    assert trajectories(db_url) == [("conv-kill", 0, 12)]  # one trial, every call
