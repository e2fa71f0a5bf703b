"""``toollens demo``: the example runs of the simulated agent, and the
simulated agent's errors following the example descriptions (v1 poor, v2
rewritten with the four patterns); tests/agents/test_simulated_reading.py pins how
it reads descriptions on small toolsets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from app.agents.simulated import SimRates, SimulatedAgent, described_formats
from app.core.reports.evaluate import score_trajectories
from app.core.run.runner import run_case
from app.core.suites.suite import load_suite
from app.store import queries
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_demo_records_the_example_runs(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "--no-serve", "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "simulated agent" in done.stderr and "Ctrl-C" not in done.stderr and "http://" not in done.stderr
    assert f"Example runs stored in {db}. `toollens serve --db demo.db` shows them" in " ".join(done.stderr.split())
    engine = make_engine(f"sqlite:///{db}")
    with session_scope(make_sessionmaker(engine)) as s:
        runs = {r.name: r for r in s.scalars(select(Run))}
        figures = {r.name: queries.figures(s, r.id, cases_limit=1) for r in runs.values()}
    engine.dispose()
    # the seed's story, as the README tells it: v2's descriptions cut confusions and schema errors;
    # descriptions do not fix error handling, so hallucination after an error stays above zero in the five-trial
    # runs (the one-trial v1 run, 36 errors, happens to draw none: 0/36, v2 1/35)
    for suffix in ("", "-x5"):
        v1, v2 = figures[f"banca-v1-simulado{suffix}"], figures[f"banca-v2-simulado{suffix}"]
        assert confusions(v2) < confusions(v1), suffix
        assert schema_errors(v2) < schema_errors(v1), suffix
    one = [figures[f"banca-{v}-simulado"]["hallucination_after_error"] for v in ("v1", "v2")]
    assert [(h["num"], h["den"]) for h in one] == [(0, 36), (1, 35)]
    v1, v2 = figures["banca-v1-simulado-x5"], figures["banca-v2-simulado-x5"]
    assert v1["hallucination_after_error"]["num"] > 0 and v2["hallucination_after_error"]["num"] > 0
    # the stand-in of issue 44 (clauses, schemas, formats): 34, 19, 51, 24 before it; 21, 13, 30, 12 before it
    # read no format in a negated clause and left a value that fits another step's format to that step
    assert (confusions(v1), confusions(v2), schema_errors(v1), schema_errors(v2)) == (21, 10, 30, 16)
    # v2 states its preconditions ("Obtén el id con buscar_cliente primero"): fewer broken pairs (a pair
    # counts where its second call succeeded without a successful first one before it)
    assert (order_errors(v1), order_errors(v2)) == (11, 3)  # 17, 10 before issue 44's stand-in; 11, 7 before its fix
    assert sorted(runs) == [
        "banca-v1-simulado",
        "banca-v1-simulado-x5",
        "banca-v2-conversaciones",
        "banca-v2-perfiles",
        "banca-v2-simulado",
        "banca-v2-simulado-x5",
    ]
    # the conversations: 5 cases x 3 trials + the sweep of their 11 expected steps, every record with its messages
    engine = make_engine(f"sqlite:///{db}")
    with session_scope(make_sessionmaker(engine)) as s:
        conversations = list(queries.export_records(s, runs["banca-v2-conversaciones"].id))
    engine.dispose()
    assert len(conversations) == 5 * 3 + 11 and all(r.get("messages") for r in conversations)
    nota = next(r for r in conversations if r["case_id"] == "conv-nota-001" and r["trial"] == 2)
    said = [m["content"] for m in nota["messages"]]
    assert said[2] == "Mi rut es 12345678-9." and said[4] == "Sí, confirmo." and said[-1].endswith("###STOP###")
    assert [c["name"] for c in nota["calls"]][-1] == "emitir_nota_credito"
    assert nota["messages"][4]["calls_before"] == len(nota["calls"]) - 1  # issued only after the confirmation
    assert all(
        r.status == "finished" and r.agent == "simulated" and r.model == "simulated (seed 5)" for r in runs.values()
    )
    assert runs["banca-v1-simulado-x5"].config["trials"] == 5
    profiled(figures["banca-v2-perfiles"], runs["banca-v2-perfiles"], db)


def profiled(figures: dict[str, Any], run: Run, db: Path) -> None:
    """The demo's cooperation gap: the conversations under every simulated-user profile, 8 trials each,
    the agent's call errors off (few confusions), so that what moves is the user."""
    from app.core.reports.cooperation import gap_view
    from app.store.profiles import run_gap

    assert run.config["user_profiles"] == [
        "cooperative",
        "impatient",
        "drip_feed",
        "wrong_assumption",
        "omits_detail",
        "changes_mind",
    ]
    trials = {p: f["trials"] for p, f in figures["profiles"].items()}
    # the 3 cases with a simulated user: every profile passes all 8 trials of pedido and saldo; on the
    # credit note (two confirmations) the impatient user leaves 5 times and changes_mind's declined
    # confirmation loses 5 of 8
    assert {p: t["conv-nota-001"] for p, t in trials.items()} == {
        "cooperative": [8, 8],
        "impatient": [8, 3],
        "drip_feed": [8, 8],
        "wrong_assumption": [8, 8],
        "omits_detail": [8, 8],
        "changes_mind": [8, 3],
    }
    assert all(t["conv-pedido-001"] == t["conv-saldo-001"] == [8, 8] for t in trials.values())
    # the headline: the cooperative user's 40 conversations (3 with a user + 2 scripted, 8 trials), all passed.
    # Every conversation (the 15 the user broke left out: impatient 5, wrong_assumption 10): 140 of 145; per
    # (case, profile), 20 of them, 1 each but changes_mind's credit note 3/8: pass^1 = (19 + 3/8) / 20 = 0.96875;
    # pass^8 over the 16 with 8 trials (impatient's note has 3 left, wrong_assumption's 2, 6, 6): 15/16
    assert figures["pass_hat_k"] == {str(k): 1.0 for k in range(1, 9)}
    every = figures["all_profiles"]
    assert (every["scored"], every["passed"], every["pass_hat_k"]["1"], every["pass_hat_k"]["8"]) == (
        145,
        140,
        0.9688,
        0.9375,
    )
    engine = make_engine(f"sqlite:///{db}")
    with session_scope(make_sessionmaker(engine)) as s:
        public = queries.run_public(s, run)
        gap = run_gap(s, run.id)
    engine.dispose()
    assert (public.passed, public.scored) == (40, 40)
    assert gap is not None and gap.k == 8
    rows = {r.profile: r for r in gap.rows}
    # impatient and changes_mind: 19 of 24 (79.2%) against 24 of 24, pass^8 2/3 (the note at 0): −33.3 pts,
    # an interval below 0 (they cost more than noise); the other three: no gap
    for name in ("impatient", "changes_mind"):
        r = rows[name]
        assert (r.conversations, r.passed, round(r.gap_1 or 0, 4), round(r.gap_k or 0, 4)) == (24, 19, -0.2083, -0.3333)
        assert r.gap_1_ci is not None and r.gap_1_ci[1] < 0
    assert all(rows[n].gap_k == 0 for n in ("drip_feed", "wrong_assumption", "omits_detail"))
    assert gap.band_k == (2 / 3, 1.0)
    view = gap_view(gap)  # the run page's table: the cooperative user has no act, so no rate
    assert view is not None and [(r.profile, r.rate) for r in view.rows][:3] == [
        ("cooperative", "—"),
        ("impatient", "0.5"),
        ("drip_feed", "1"),
    ]


def confusions(figures: dict[str, Any]) -> int:
    """Calls to a real tool other than the expected one."""
    return sum(
        c["count"]
        for c in figures["confusion"]
        if c["expected"] != c["called"] and "(" not in c["expected"] + c["called"] and not c["hallucinated"]
    )


def order_errors(figures: dict[str, Any]) -> int:
    """Declared pairs (A before B) broken."""
    return sum(int(d["count"]) for d in figures["dependency_violations"])


def schema_errors(figures: dict[str, Any]) -> int:
    return int(figures["schema_validity"]["den"] - figures["schema_validity"]["num"])


def test_schema_errors_halve_where_the_description_states_the_format() -> None:
    v1 = described_formats(load_suite(EXAMPLES / "suite_v1.yaml").toolset)
    v2 = described_formats(load_suite(EXAMPLES / "suite_v2.yaml").toolset)
    assert ("ver_saldo", "id") not in v1 and ("ver_saldo", "id") in v2  # "Requiere el id interno (entero ...)"
    assert ("buscar_cliente", "rut") in v2 and len(v2) > len(v1)


def test_v2_descriptions_reduce_the_simulated_agents_confusions() -> None:
    rates = SimRates(hallucinated_tool=0, schema_error=0, wrong_value=0, order=0, skip=0)
    confusions = {}
    for version in ("v1", "v2"):
        suite = load_suite(EXAMPLES / f"suite_{version}.yaml")
        agent = SimulatedAgent(suite.toolset, rates=rates, seed=7)
        trajs = [run_case(agent.for_case(c, t), suite, c, trial=t) for c in suite.cases for t in range(10)]
        report = score_trajectories(suite, trajs).to_json()
        confusions[version] = sum(
            c["count"]
            for c in report["confusion"]
            if c["expected"] != c["called"] and "(" not in c["expected"] + c["called"]
        )
    assert confusions == {"v1": 34, "v2": 12}  # seed 7, ten trials of the 18 cases (docs/runner.md quotes them)


def test_zero_rates_make_a_perfect_agent() -> None:
    zero = SimRates(
        confusion=0, hallucinated_tool=0, schema_error=0, wrong_value=0, order=0, skip=0, retry=1, give_up=0, invent=0
    )
    suite = load_suite(EXAMPLES / "suite_v2.yaml")
    agent = SimulatedAgent(suite.toolset, rates=zero)
    report = score_trajectories(suite, [run_case(agent.for_case(c, 0), suite, c) for c in suite.cases]).to_json()
    assert report["pass_hat_k"] == {"1": 1.0}
    assert report["schema_validity"]["num"] == report["schema_validity"]["den"] == 32


def test_a_taken_port_is_reported_before_anything_is_recorded(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "demo", "--db", str(tmp_path / "d.db"), "--port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port 8080" in done.stderr
    assert "make demo PORT=8080" in done.stderr
    assert "dashboard" not in done.stderr and "Recording" not in done.stderr and not (tmp_path / "d.db").exists()


def test_the_demo_serves_the_dashboard_on_the_port_asked_for(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "demo", "--db", str(tmp_path / "d.db"), "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the demo did not serve"
                time.sleep(0.2)
        assert page.status_code == 200 and "banca-v2-simulado-x5" in page.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}" in err and "scoring: " in err
