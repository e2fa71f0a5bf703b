"""``toollens run``: the work list, shards, resume, infrastructure errors,
and a run killed midway (SIGKILL) then resumed, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.core.errors import ToolLensError
from app.core.run.router import FaultPlan
from app.core.suites.suite import load_suite
from app.runner.session import RunRequest, RunSetupError, run_agent
from app.runner.work import ShardSpecError, in_shard, parse_shard, plan_work, still_missing
from app.settings import Settings
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.infra import infra_errors
from app.store.models import Run, TrajectoryRow
from tests.fake_llm import FakeLLM, Turn, serve

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "suite_v1.yaml"
CASES = 18
SWEEP_ITEMS = 32  # one per expected step of the 18 cases


def _settings(url: str) -> Settings:
    return Settings(database_url=url)


def _rows(url: str, run_name: str) -> list[tuple[str, int, str]]:
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as s:
            run_id = s.scalar(select(Run.id).where(Run.name == run_name))
            return [
                tuple(r)
                for r in s.execute(  # type: ignore[misc]
                    select(TrajectoryRow.case_id, TrajectoryRow.trial, TrajectoryRow.fault_key).where(
                        TrajectoryRow.run_id == run_id
                    )
                )
            ]
    finally:
        engine.dispose()


# -- the work list -------------------------------------------------------------


def test_plan_counts_trials_and_numbers_the_sweep_after_them() -> None:
    suite = load_suite(SUITE)
    items = plan_work(suite, trials=3, sweep=True)
    assert len(items) == CASES * 3 + SWEEP_ITEMS
    assert sum(1 for i in items if i.variant.startswith("sweep:")) == SWEEP_ITEMS
    saldo = [(i.trial, i.variant) for i in items if i.case.id == "saldo-001"]
    assert saldo == [(0, ""), (1, ""), (2, ""), (3, "sweep:0:http_503"), (4, "sweep:1:http_503")]
    assert len({(i.case.id, i.trial) for i in items}) == len(items)  # (case, trial) names every item


def test_shards_partition_the_work() -> None:
    items = plan_work(load_suite(SUITE), trials=2, sweep=True)
    slices = [[i for i in items if in_shard(i, k, 3)] for k in (1, 2, 3)]
    assert sorted(len(s) for s in slices) != [0, 0, len(items)]
    assert sum(len(s) for s in slices) == len(items)
    assert {id(i) for s in slices for i in s} == {id(i) for i in items}
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x/3", "3"):
        with pytest.raises(ShardSpecError, match="--shard"):
            parse_shard(bad)


def test_still_missing_goes_by_case_and_trial_whatever_the_fault() -> None:
    items = plan_work(load_suite(SUITE), trials=2, faults=FaultPlan(probability=0.5, seed=3), sweep=True)
    stored = {("saldo-001", 2, "0:http_503"), ("saldo-001", 1, "3:timeout")}  # sweep step 0, and plain trial 1
    left = still_missing(items, stored)
    assert len(left) == len(items) - 2
    assert [(i.trial, i.variant) for i in left if i.case.id == "saldo-001"] == [(0, ""), (3, "sweep:1:http_503")]


# -- runs in the store -----------------------------------------------------------


def test_simulated_run_stores_every_case_run_and_resume_adds_nothing(db_url: str) -> None:
    settings = _settings(db_url)
    out = run_agent(
        settings, RunRequest(agent="simulated", suite_path=SUITE, trials=2, sweep=True, run_name="sim", concurrency=8)
    )
    assert out.finished and out.planned == CASES * 2 + SWEEP_ITEMS
    assert out.summary.stored == out.planned and out.summary.infra_errors == 0
    rows = _rows(db_url, "sim")
    assert len(rows) == len(set(rows)) == out.planned
    again = run_agent(settings, RunRequest(resume="sim"))
    assert again.planned == 0 and again.summary.stored == 0 and again.finished
    with pytest.raises(RunSetupError, match="exists already: --resume sim"):
        run_agent(settings, RunRequest(agent="simulated", suite_path=SUITE, run_name="sim"))


def test_the_same_seed_gives_the_same_trajectories(tmp_path: Path) -> None:
    answers = []
    for n in (1, 2):
        url = f"sqlite:///{tmp_path / f'{n}.db'}"
        run_agent(_settings(url), RunRequest(agent="simulated", suite_path=SUITE, run_name="r", seed=4))
        engine = make_engine(url)
        with session_scope(make_sessionmaker(engine)) as s:
            answers.append(
                list(
                    s.execute(
                        select(TrajectoryRow.case_id, TrajectoryRow.answer, TrajectoryRow.passed).order_by(
                            TrajectoryRow.case_id
                        )
                    )
                )
            )
        engine.dispose()
    assert answers[0] == answers[1]


def test_two_shards_share_one_run_without_duplicates(db_url: str) -> None:
    settings = _settings(db_url)
    base = {"agent": "simulated", "suite_path": SUITE, "trials": 2, "sweep": True, "run_name": "sharded"}
    first = run_agent(settings, RunRequest(**base, shard="1/2"))  # type: ignore[arg-type]
    assert not first.finished and 0 < first.planned < CASES * 2 + SWEEP_ITEMS
    second = run_agent(settings, RunRequest(**base, shard="2/2"))  # type: ignore[arg-type]
    assert second.finished
    assert first.planned + second.planned == CASES * 2 + SWEEP_ITEMS
    rows = _rows(db_url, "sharded")
    assert len(rows) == len(set(rows)) == CASES * 2 + SWEEP_ITEMS
    with pytest.raises(RunSetupError, match="trials=2, not 3"):
        run_agent(settings, RunRequest(**{**base, "trials": 3}, shard="1/2"))  # type: ignore[arg-type]


def test_endpoint_failures_are_infrastructure_errors_and_resume_retries_them(db_url: str) -> None:
    app = FakeLLM(default=Turn(text="No pude consultar."))
    broken = load_suite(SUITE).case("saldo-001").question  # type: ignore[union-attr]
    app.errors[broken] = [500] * 2  # both attempts of the first run fail; the resumed run gets through
    settings = _settings(db_url)
    with serve(app) as url:
        req = RunRequest(
            agent="openai",
            model="m",
            base_url=f"{url}/v1",
            suite_path=SUITE,
            run_name="flaky",
            attempts=2,
            backoff=0.01,
            concurrency=4,
        )
        out = run_agent(settings, req)
        assert out.summary.infra_errors == 1 and out.summary.stored == CASES - 1 and not out.finished
        engine = make_engine(db_url)
        with session_scope(make_sessionmaker(engine)) as s:
            run_id = s.scalar(select(Run.id).where(Run.name == "flaky"))
            errors = infra_errors(s, run_id)  # type: ignore[arg-type]
            assert [(e.case_id, e.trial, e.fault_key) for e in errors] == [("saldo-001", 0, "")]
            assert "failed 2 times: InternalServerError 500" in errors[0].message
        again = run_agent(settings, RunRequest(resume="flaky", attempts=2, backoff=0.01))
        assert again.planned == 1 and again.summary.stored == 1 and again.finished
        with session_scope(make_sessionmaker(engine)) as s:
            assert infra_errors(s, run_id) == []  # type: ignore[arg-type]
            assert (
                s.scalar(select(func.count()).select_from(TrajectoryRow).where(TrajectoryRow.run_id == run_id)) == CASES
            )
        engine.dispose()
        assert req.config()["base_url"] == f"{url}/v1"  # a resumed run finds its endpoint; keys are never kept
    assert not any("key" in k for k in req.config())


def test_a_run_killed_midway_resumes_with_every_case_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    app = FakeLLM(delay=0.15, default=Turn(text="Listo."))
    env = {**os.environ, "OPENAI_API_KEY": "k"}
    with serve(app) as base:
        cmd = [
            sys.executable,
            "-m",
            "app.cli",
            "run",
            str(SUITE),
            "--agent",
            "openai",
            "--model",
            "m",
            "--base-url",
            f"{base}/v1",
            "--run",
            "killed",
            "--trials",
            "3",
            "--concurrency",
            "2",
            "--db",
            url,
        ]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                if len(_rows(url, "killed")) >= 5:
                    break
            except Exception:  # the database is not created yet
                continue
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        before = _rows(url, "killed")
        assert 5 <= len(before) < CASES * 3
        resumed = subprocess.run(
            [sys.executable, "-m", "app.cli", "run", "--resume", "killed", "--concurrency", "8", "--db", url],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr
    after = _rows(url, "killed")
    assert len(after) == len(set(after)) == CASES * 3
    assert set(before) <= set(after)
    assert "run finished" in resumed.stderr


AGENT_SOURCE = """
def agent(question, toolbox):
    if "PED-" in question:
        raise RuntimeError("boom")
    toolbox.call("buscar_cliente", {"rut": "12345678-9"})
    return "listo"
"""


def test_a_python_agent_by_module_and_function_and_its_crashes(tmp_path: Path) -> None:
    (tmp_path / "my_agent.py").write_text(AGENT_SOURCE)
    url = f"sqlite:///{tmp_path / 'py.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(SUITE), "--agent", "my_agent:agent", "--run", "py", "--db", url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    crashing = sum(1 for c in load_suite(SUITE).cases if "PED-" in c.question)
    assert f"stored {CASES} of {CASES} case runs" in done.stderr
    assert f"{crashing} agent errors" in done.stderr and crashing > 0
    engine = make_engine(url)
    with session_scope(make_sessionmaker(engine)) as s:
        run = s.scalar(select(Run).where(Run.name == "py"))
        assert run is not None and run.agent == "python my_agent:agent"
        stopped = [t.detail.get("stopped") for t in s.scalars(select(TrajectoryRow))]
    engine.dispose()
    assert stopped.count("agent_error") == crashing
    missing = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(SUITE), "--agent", "nope:agent", "--run", "py2", "--db", url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "cannot import 'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr
    engine = make_engine(url)
    with session_scope(make_sessionmaker(engine)) as s:
        assert s.scalar(select(Run).where(Run.name == "py2")) is None  # a bad --agent stores nothing
    engine.dispose()


def test_faults_with_the_sweep_store_every_case_run(db_url: str) -> None:
    """A plain trial whose fault falls on a sweep's step is another case run, not a duplicate."""
    settings = _settings(db_url)
    out = run_agent(
        settings,
        RunRequest(agent="simulated", suite_path=SUITE, faults="index:1=http_503", sweep=True, run_name="both"),
    )
    assert out.summary.stored == CASES + SWEEP_ITEMS and out.summary.duplicates == 0 and out.finished


def test_a_plan_whose_fault_moves_still_resumes_to_nothing(tmp_path: Path) -> None:
    """With schema errors the router skips a planned fault and the next index
    fires: the stored fault differs from the plan's first, yet resume is whole."""
    settings = _settings(f"sqlite:///{tmp_path / 'm.db'}")
    out = run_agent(
        settings,
        RunRequest(
            agent="simulated",
            suite_path=SUITE,
            trials=3,
            run_name="m",
            faults="index:1=http_503,index:2=timeout",
            sim_rates="schema_error=0.5",
        ),
    )
    assert out.finished and out.summary.stored == CASES * 3
    assert {k for _, _, k in _rows(settings.database_url, "m")} >= {"1:http_503", "2:timeout"}
    again = run_agent(settings, RunRequest(resume="m"))
    assert again.planned == 0 and again.finished


def test_shards_with_chance_faults_and_the_sweep_close_the_run(db_url: str) -> None:
    settings = _settings(db_url)
    base = {"agent": "simulated", "suite_path": SUITE, "faults": "p:0.2,seed:3", "sweep": True, "run_name": "sh"}
    first = run_agent(settings, RunRequest(**base, shard="2/2"))  # type: ignore[arg-type]
    second = run_agent(settings, RunRequest(**base, shard="1/2"))  # type: ignore[arg-type]
    assert first.planned + second.planned == CASES + SWEEP_ITEMS and second.finished


def test_shards_started_together_join_one_run(db_url: str) -> None:
    settings = _settings(db_url)
    base = {"agent": "simulated", "suite_path": SUITE, "trials": 2, "run_name": "together", "concurrency": 4}
    outcomes: dict[str, object] = {}

    def shard(spec: str) -> None:
        try:
            outcomes[spec] = run_agent(settings, RunRequest(**base, shard=spec))  # type: ignore[arg-type]
        except Exception as exc:  # reported below
            outcomes[spec] = exc

    threads = [threading.Thread(target=shard, args=(f"{i}/3",)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(not isinstance(o, Exception) for o in outcomes.values()), outcomes
    rows = _rows(db_url, "together")
    assert len(rows) == len(set(rows)) == CASES * 2


def test_only_runs_of_the_runner_resume_and_bad_options_store_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    settings = _settings(url)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "import",
            str(ROOT / "examples" / "trajectories_v1.jsonl"),
            "--suite",
            str(SUITE),
            "--run",
            "imported",
            "--db",
            url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with pytest.raises(RunSetupError, match="not made by `toollens run`"):
        run_agent(settings, RunRequest(resume="imported"))
    for bad, message in (
        ({"faults": "index:x"}, "--faults"),
        ({"shard": "0/2"}, "--shard"),
        ({"sweep_kind": "bogus"}, "--sweep-kind"),
        ({"trials": 0}, "--trials"),
    ):
        with pytest.raises(ToolLensError, match=message):
            run_agent(settings, RunRequest(agent="simulated", suite_path=SUITE, run_name="bad", **bad))  # type: ignore[arg-type]
    engine = make_engine(url)
    with session_scope(make_sessionmaker(engine)) as s:
        assert s.scalar(select(Run).where(Run.name == "bad")) is None
    engine.dispose()


CALLS: list[str] = []


def counting_agent(question: str, toolbox: object) -> str:
    CALLS.append(question)
    return "listo \x00 con NUL"


def test_a_failing_writer_stops_the_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.store import ingest

    real, seen = ingest.add_trajectories, []

    def flaky(*args: object, **kw: object) -> int:
        seen.append(1)
        if len(seen) > 1:
            raise RuntimeError("disk full")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "add_trajectories", flaky)
    CALLS.clear()
    with pytest.raises(RuntimeError, match="disk full"):
        run_agent(
            _settings(f"sqlite:///{tmp_path / 'w.db'}"),
            RunRequest(
                agent="tests.runner.test_runner:counting_agent",
                suite_path=SUITE,
                trials=20,
                run_name="w",
                concurrency=2,
            ),
        )
    assert 2 <= len(CALLS) < 40  # not the 360 case runs of the whole run


def test_nul_characters_from_an_agent_are_stored_on_both_databases(db_url: str) -> None:
    out = run_agent(
        _settings(db_url), RunRequest(agent="tests.runner.test_runner:counting_agent", suite_path=SUITE, run_name="nul")
    )
    assert out.summary.stored == CASES and out.summary.infra_errors == 0
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine)) as s:
        answers = set(s.scalars(select(TrajectoryRow.answer)))
    engine.dispose()
    assert answers == {"listo \ufffd con NUL"}
