"""The OTLP receiver's buffer under the hardening review's probe, scaled to run in a minute,
against a real `toollens serve` on SQLite and PostgreSQL: one conversation kept open cannot
take the buffer (it is refused, with 413, past its own bound, before anything of the request is
acknowledged) and a normal batch to another run is still taken; nothing acknowledged is
dropped when the conversation is stored; many conversations meet the global bound (503 naming
it) instead of growing memory."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from app.core.records import MAX_CALLS
from app.store.models import Run, TrajectoryRow
from tests.otlp.test_otlp import SUITE, body, span
from tests.servers import free_port
from tests.store.test_kills import Server, servers  # noqa: F401  (fixture)

ARGS = "gen_ai.tool.call.arguments"


def conversation_batch(conversation: str, first: int, n: int) -> bytes:
    """``n`` tool spans of one conversation (``session.id``), each its own trace, as a harness
    tracing one call per request would send them."""
    spans = [
        span(
            f"{i:032x}",
            f"{i:016x}",
            "",
            10 + i,
            tool="buscar_cliente",
            attrs={"session.id": conversation, ARGS: '{"rut": "1-9"}'},
        )
        for i in range(first, first + n)
    ]
    return json.dumps(body(*spans)).encode()


def post(base: str, data: bytes, run: str, group: bool = True) -> httpx.Response:
    query = f"?run={run}" + ("&group_by=session.id" if group else "")
    return httpx.post(
        f"{base}/v1/traces{query}", content=data, headers={"content-type": "application/json"}, timeout=60
    )


def calls_stored(db_url: str, run: str) -> list[tuple[str, int]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            run_id = conn.scalar(select(Run.id).where(Run.name == run))
            return sorted(
                (str(c), int(n))
                for c, n in conn.execute(
                    select(TrajectoryRow.case_id, TrajectoryRow.n_calls).where(TrajectoryRow.run_id == run_id)
                )
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("spans_bound", [6_000])
def test_one_open_conversation_is_bounded_and_nothing_acknowledged_is_dropped(
    db_url: str,
    tmp_path: Path,
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    spans_bound: int,
) -> None:
    monkeypatch.setenv("TOOLLENS_OTLP_MAX_TRACE_SPANS", str(spans_bound))
    monkeypatch.setenv("TOOLLENS_OTLP_MAX_BUFFERED_SPANS", "20000")
    server = Server(db_url, free_port(), tmp_path / "serve.log", warm=False)
    servers.append(server)
    base = server.wait_up().base
    for name in ("talk", "other"):
        assert httpx.post(f"{base}/api/runs", json={"name": name, "suite": SUITE}, timeout=30).status_code == 201
    acknowledged = 0
    refused: list[httpx.Response] = []
    for i in range(12):  # 12 x 500 tool calls to one conversation that never closes
        r = post(base, conversation_batch("forever", 500 * i, 500), "talk")
        if r.status_code == 200:
            acknowledged += 500
        else:
            refused.append(r)
    # refused past the 5,000 calls one trajectory holds, before anything was acknowledged
    assert acknowledged == MAX_CALLS and len(refused) == 2
    assert {r.status_code for r in refused} == {413}
    assert f"more than the {MAX_CALLS} one trajectory holds" in refused[0].json()["error"]
    # past its span bound too (other spans than calls), naming the setting
    chat = [span(f"{i:032x}", f"{i:016x}", "", i, attrs={"session.id": "forever"}) for i in range(9_000, 9_000 + 1_500)]
    r = post(base, json.dumps(body(*chat)).encode(), "talk")
    assert r.status_code == 413 and "TOOLLENS_OTLP_MAX_TRACE_SPANS" in r.json()["error"], r.text
    # meanwhile a normal 512-span batch to another run is taken
    normal = [
        span(f"{i + 1:032x}", "01", "", i, tool="ver_saldo", attrs={"toollens.case_id": "c-normal"}) for i in range(512)
    ]
    assert post(base, json.dumps(body(*normal)).encode(), "other", group=False).status_code == 200
    status = httpx.get(f"{base}/v1/traces/status", timeout=10).json()
    assert status["accepted_spans"] == MAX_CALLS + 512 and status["refused_requests"] == 3
    server.proc.send_signal(signal.SIGTERM)  # shutdown stores what is buffered
    assert server.proc.wait(timeout=120) in (0, -signal.SIGTERM), server.output()
    # every acknowledged call is in the conversation's one trajectory: nothing cut, nothing dropped
    assert calls_stored(db_url, "talk") == [("forever", acknowledged)]
    assert len(calls_stored(db_url, "other")) == 512


def test_many_conversations_meet_the_global_bound(
    db_url: str,
    tmp_path: Path,
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLLENS_OTLP_MAX_TRACES", "2000")
    server = Server(db_url, free_port(), tmp_path / "serve.log", warm=False)
    servers.append(server)
    base = server.wait_up().base
    assert httpx.post(f"{base}/api/runs", json={"name": "many", "suite": SUITE}, timeout=30).status_code == 201
    answers = []
    for i in range(6):  # 500 distinct conversations per request
        spans = [
            span(f"{j:032x}", "01", "", j, tool="buscar_cliente", attrs={"session.id": f"conv-{j}"})
            for j in range(500 * i, 500 * i + 500)
        ]
        answers.append(post(base, json.dumps(body(*spans)).encode(), "many"))
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 503, 503]
    assert "TOOLLENS_OTLP_MAX_TRACES" in answers[-1].json()["error"] and answers[-1].headers["retry-after"] == "1"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=120) in (0, -signal.SIGTERM), server.output()
    assert len(calls_stored(db_url, "many")) == 2000  # every acknowledged conversation, once
