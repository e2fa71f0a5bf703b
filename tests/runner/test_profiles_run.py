"""``toollens run --user-profile``: a tiny suite, a deterministic agent, and the
cooperation gap computed by hand, from the stored figures to the run page and
compare over HTTP (the app's TestClient)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.core.reports.profiles import cooperation_gap
from app.settings import Settings
from app.store.db import make_engine, make_sessionmaker
from app.store.models import Run
from app.store.profiles import paired_flips, profile_figures, run_gap
from app.web.app import create_app

runner = CliRunner()

# The agent asks for both facts at once, then acts on whatever it was given: the drip-feeding user
# gives one fact per reply, so the agent calls with one missing and fails; every other user passes.
HASTY = """\
import re


def agent(question, toolbox):
    said = " ".join(m["content"] for m in toolbox.messages if m["role"] == "user")
    rut = re.search(r"\\d{7,8}-[\\dkK]", said)
    numero = re.search(r"PED-\\d{5}", said)
    if not (rut and numero) and not any(m["role"] == "assistant" for m in toolbox.messages):
        return "¿Me das tu RUT y tu número de pedido?"
    toolbox.call("buscar_pedido", {"rut": rut.group(0) if rut else "", "numero": numero.group(0) if numero else ""})
    return "Listo: tu pedido va en camino."
"""
# Asks for one fact at a time: the impatient user may leave at its second ask.
SLOW = """\
import re


def agent(question, toolbox):
    said = " ".join(m["content"] for m in toolbox.messages if m["role"] == "user")
    rut = re.search(r"\\d{7,8}-[\\dkK]", said)
    numero = re.search(r"PED-\\d{5}", said)
    if not rut:
        return "¿Me das tu RUT?"
    if not numero:
        return "¿Y tu número de pedido?"
    toolbox.call("buscar_pedido", {"rut": rut.group(0), "numero": numero.group(0)})
    return "Listo: tu pedido va en camino."
"""
SUITE: dict[str, Any] = {
    "name": "perfiles",
    "toolset": [
        {
            "name": "buscar_pedido",
            "description": "Busca un pedido por RUT y número.",
            "parameters": {
                "type": "object",
                "properties": {"rut": {"type": "string"}, "numero": {"type": "string"}},
                "required": ["rut", "numero"],
            },
            "mock": {
                "responses": [
                    {"when": {"rut": "12345678-9", "numero": "PED-12345"}, "response": {"estado": "en camino"}}
                ]
            },
        }
    ],
    "cases": [
        {
            "id": "pedido",
            "question": "Hola, ¿dónde está mi pedido?",
            "user": {
                "instruction": "Eres Ana Rojas y quieres saber dónde está tu pedido.",
                "known": {"rut": "12345678-9", "pedido": "PED-12345"},
                "patience": 4,
            },
            "expected_calls": [{"name": "buscar_pedido", "arguments": {"rut": "12345678-9", "numero": "PED-12345"}}],
        },
        {
            "id": "solo",
            "question": "¿Dónde está el pedido PED-12345 del RUT 12345678-9?",
            "expected_calls": [{"name": "buscar_pedido", "arguments": {"rut": "12345678-9", "numero": "PED-12345"}}],
        },
    ],
}


def run(tmp_path: Path, db_url: str, name: str, *profiles: str, agent: str = "hasty", trials: int = 2) -> Any:
    (tmp_path / "hasty.py").write_text(HASTY, encoding="utf-8")
    (tmp_path / "slow.py").write_text(SLOW, encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(SUITE, allow_unicode=True), encoding="utf-8")
    args = [
        "run",
        str(tmp_path / "suite.yaml"),
        "--agent",
        f"{tmp_path / agent}.py:agent",
        "--trials",
        str(trials),
        "--run",
        name,
        "--db",
        db_url,
    ]
    for p in profiles:
        args += ["--user-profile", p]
    return runner.invoke(cli, args)


def test_run_with_two_profiles_measures_the_gap_by_hand(tmp_path: Path, db_url: str) -> None:
    done = run(tmp_path, db_url, "hasty", "drip_feed", "impatient")
    assert done.exit_code == 0, done.output
    # 'pedido': 2 trials under each of 3 users; 'solo' (no simulated user): its 2 plain trials only
    assert "stored 8 of 8 case runs, 2 failed" in done.output
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as s:
            run_id = s.query(Run.id).filter(Run.name == "hasty").scalar()
            assert s.get(Run, run_id).config["user_profiles"] == ["cooperative", "impatient", "drip_feed"]  # type: ignore[union-attr]
            figures = profile_figures(s, run_id)
            # each drip_feed conversation against the cooperative trial it mirrors: passed there, failed here
            assert paired_flips(s, run_id) == {"impatient": [0, 0], "drip_feed": [2, 0]}
            paired = {r.profile: (r.paired, r.paired_p) for r in run_gap(s, run_id).rows}  # type: ignore[union-attr]
            assert paired["drip_feed"] == ((2, 0), 0.5) and paired["cooperative"] == (None, None)
    finally:
        engine.dispose()
    assert {p: f["trials"] for p, f in figures.items()} == {
        "cooperative": {"pedido": [2, 2]},
        "impatient": {"pedido": [2, 2]},
        "drip_feed": {"pedido": [2, 0]},
    }
    # impatient never leaves: the agent asks once, at the user's first reply; drip_feed holds back every time
    assert (figures["drip_feed"]["acted"], figures["impatient"]["acted"]) == (2, 0)
    gap = cooperation_gap(figures)
    assert gap is not None and gap.k == 2
    rows = {r.profile: r for r in gap.rows}
    # by hand: cooperative 2/2 → pass^1 = pass^2 = 1; drip_feed 0/2 → 0, 0; impatient 2/2 → 1, 1
    assert (rows["drip_feed"].gap_1, rows["drip_feed"].gap_k) == (-1.0, -1.0)
    assert (rows["impatient"].gap_1, rows["impatient"].gap_k) == (0.0, 0.0)
    assert gap.band_k == (0.0, 1.0) and gap.band_gap == (-1.0, 0.0) and gap.spread == 1.0

    shown = runner.invoke(cli, ["show", "hasty", "--db", db_url], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "Cooperation gap" in shown.output
    assert re.search(r"drip_feed\s+│\s+1\s+│\s+2\s+│\s+0\.0%\s+│\s+0\.0%\s+│\s+−100\.0 pts", shown.output)

    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        page = client.get(f"/runs/{run_id}", headers={"accept": "text/html"})
        assert page.status_code == 200
        section = page.text[page.text.index('<section id="cooperation"') :]
        section = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section[: section.index("</section>")]))
        assert (
            "pass^2 under the cooperative user 100.0%; under the other 2 profiles from 0.0% to 100.0% "
            "(gap −100.0 pts to +0.0 pts); the largest drop: drip_feed" in section
        )
        assert "drip feed 1 2 0.0% 0.0% −100.0 pts" in section  # rate, conversations, pass^1, pass^2, gap
        assert "−100.0 pts 2 / 0 (p 0.5) 2 2 (0) 0" in section  # gap pass^2, paired, act fired, failed, broken
        assert "drip feed user" in page.text  # the trajectory list marks a profile's conversations
        listed = client.get(f"/api/runs/{run_id}/trajectories", params={"passed": "false"}).json()["data"]
        drip = [t for t in listed if t["user_profile"] == "drip_feed"]
        assert len(drip) == 2
        one = client.get(f"/trajectories/{drip[0]['id']}", headers={"accept": "text/html"}).text
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", one))
        assert "The simulated user played the drip_feed profile" in text and "held_back message 3: gives" in text
        assert set(client.get(f"/api/runs/{run_id}/figures").json()["profiles"]) == {
            "cooperative",
            "impatient",
            "drip_feed",
        }


def test_compare_sets_two_runs_profile_by_profile(tmp_path: Path, db_url: str) -> None:
    assert run(tmp_path, db_url, "a", "drip_feed").exit_code == 0
    assert run(tmp_path, db_url, "b", "drip_feed,impatient").exit_code == 0
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        data = client.get("/api/compare", params={"a": 1, "b": 2}).json()["cooperation"]
        assert [(r["profile"], r["a"], r["b"], r["delta"]) for r in data["profiles"]] == [
            ("cooperative", 1.0, 1.0, 0.0),
            ("drip_feed", 0.0, 0.0, 0.0),
            ("impatient", None, 1.0, None),
        ]
        assert data["same_profiles"] is False and data["delta_band"] == [0.0, 0.0]
        html = client.get("/compare", params={"a": 1, "b": 2}, headers={"accept": "text/html"}).text
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
        assert "the runs ran different profiles: only the rows both hold compare" in text
        assert "drip feed 0.0% 0.0% +0.0 pts −100.0 pts −100.0 pts" in text
    gated = runner.invoke(cli, ["gate", "--baseline", "a", "--candidate", "b", "--db", db_url], env={"COLUMNS": "300"})
    assert (
        "cooperation gap (A baseline, B candidate): B − A at pass^2: +0.0 pts under the cooperative user"
        in gated.output
    )


def test_a_bad_profile_is_refused_before_anything_runs(tmp_path: Path, db_url: str) -> None:
    done = run(tmp_path, db_url, "bad", "grumpy")
    assert done.exit_code == 2 and "'grumpy': not a profile" in done.output


def test_flips_under_a_profile_leave_compares_simulator_share_alone(tmp_path: Path, db_url: str) -> None:
    assert run(tmp_path, db_url, "a", "impatient", trials=6).exit_code == 0
    assert run(tmp_path, db_url, "b", "impatient", agent="slow", trials=6).exit_code == 0
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        c = client.get("/api/compare", params={"a": 1, "b": 2}).json()
        blame = client.get("/api/runs/2/blame").json()
        assert blame["by_blame"]["user"] > 0  # would have been "no verdict"
        # all of them under the impatient profile: the headline's agent-only rate leaves none of them out
        assert blame["headline_blamed_elsewhere"] == 0 and blame["pass_rate_agent_only"] == blame["pass_rate"] == 1.0
    # the slow agent asks twice: the impatient user leaves at its second ask in some trials (blamed on the user);
    # those flips are the cooperation gap's (below), out of McNemar's pairs, which are the headline's: the
    # cooperative conversations, where both agents pass
    assert c["flipped_count"] == 0 and c["flipped"] == [] and c["shared_cases"] == 12
    assert c["simulator_checked"] == 0 and c["flipped_blamed_on_user"] == 0 and c["simulator_note"] is None
    impatient = next(r for r in c["cooperation"]["profiles"] if r["profile"] == "impatient")
    assert impatient["delta"] < 0 and c["cooperation"]["delta_cooperative"] == 0.0


def test_a_resumed_run_runs_the_profiles_it_was_started_with(tmp_path: Path, db_url: str) -> None:
    half = run(tmp_path, db_url, "r", "drip_feed")  # writes the files
    assert half.exit_code == 0
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as s:
            from app.store.models import TrajectoryRow

            run_id = s.query(Run.id).filter(Run.name == "r").scalar()
            s.query(TrajectoryRow).filter(TrajectoryRow.run_id == run_id, TrajectoryRow.trial >= 2).delete()
            s.query(Run).filter(Run.id == run_id).update({"status": "running", "finished_at": None})  # interrupted
            s.commit()
    finally:
        engine.dispose()
    resumed = runner.invoke(cli, ["run", "--resume", "r", "--db", db_url])
    assert resumed.exit_code == 0, resumed.output
    assert "stored 2 of 2 case runs" in resumed.output  # drip_feed's trials 2 and 3 of 'pedido', from the config


def test_a_user_model_is_told_its_profile() -> None:
    from app.agents.users import LLMUser
    from app.core.suites.suite import UserSpec

    spec = UserSpec(instruction="You are Ann.", known={"order": "W1"})
    plain = LLMUser(model="m").prompt(spec, [])[0]["content"]
    impatient = LLMUser(model="m", profile="impatient").prompt(spec, [])[0]["content"]
    assert "impatient" not in plain and impatient.startswith(plain)
    assert impatient.endswith("leave (a short goodbye and the stop string) about half of the time.")


def test_paired_flips_are_the_same_from_the_store_the_export_and_its_import(tmp_path: Path, db_url: str) -> None:
    """What ToolLens writes, ToolLens reads: each profiled record names the cooperative trial it
    mirrors (user_mirror_trial), so score --json of the export and the imported export pair as the
    run does; a run stored before that key still pairs by its config, to the same figures."""
    import json

    from app.store.models import TrajectoryRow

    suite = str(Path(__file__).parents[2] / "examples" / "conversaciones_v2.yaml")
    made = runner.invoke(
        cli,
        [
            "run",
            suite,
            "--agent",
            "simulated",
            "--trials",
            "2",
            "--user-profile",
            "all",
            "--seed",
            "11",
            "--run",
            "r",
            "--db",
            db_url,
        ],
    )
    assert made.exit_code == 0, made.output
    want = {
        "impatient": [2, 0],
        "drip_feed": [0, 0],
        "wrong_assumption": [0, 0],
        "omits_detail": [2, 0],
        "changes_mind": [1, 0],
    }
    out = tmp_path / "r.jsonl"
    assert runner.invoke(cli, ["export", "r", "--out", str(out), "--db", db_url]).exit_code == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    profiled = [r for r in records if r.get("user_profile", "cooperative") != "cooperative"]
    assert len(profiled) == 30 and all(r["user_mirror_trial"] in (0, 1) for r in profiled)
    assert not any("user_mirror_trial" in r for r in records if r not in profiled)
    scored = runner.invoke(cli, ["score", suite, str(out), "--json"])
    assert scored.exit_code == 0, scored.output
    profiles = json.loads(scored.stdout)["profiles"]
    assert {p: f["paired"] for p, f in profiles.items() if "paired" in f} == want
    gap = cooperation_gap(profiles)
    assert gap is not None and {r.profile: r.paired_p for r in gap.rows} == {
        "cooperative": None,
        "impatient": 0.5,
        "drip_feed": 1.0,
        "wrong_assumption": 1.0,
        "omits_detail": 0.5,
        "changes_mind": 1.0,
    }
    imported = runner.invoke(cli, ["import", str(out), "--run", "imp", "--suite", suite, "--db", db_url])
    assert imported.exit_code == 0, imported.output
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as s:
            ids = dict(s.query(Run.name, Run.id).all())
            assert not (s.get(Run, ids["imp"]).config or {}).get("user_profiles")  # type: ignore[union-attr]
            assert paired_flips(s, ids["r"]) == want and paired_flips(s, ids["imp"]) == want
            assert {r.profile: r.paired for r in run_gap(s, ids["imp"]).rows} == {  # type: ignore[union-attr]
                "cooperative": None,
                **{p: tuple(v) for p, v in want.items()},
            }
            for row in s.query(TrajectoryRow).filter(TrajectoryRow.detail.is_not(None)):
                row.detail = {k: v for k, v in row.detail.items() if k != "user_mirror_trial"}  # stored before it
            s.commit()
            assert paired_flips(s, ids["r"]) == want  # from the run's config, as before the key
            assert paired_flips(s, ids["imp"]) == {}  # an import has no config to number its trials by
    finally:
        engine.dispose()


def test_a_profiled_runs_headline_is_the_cooperative_users_everywhere_by_hand(tmp_path: Path, db_url: str) -> None:
    """The pass figures of a run with profiles count its cooperative conversations, as a run made
    without profiles: the API, the pages, show, score, compare and gate alike; every conversation's
    figures are kept in ``all_profiles``."""
    import json

    assert run(tmp_path, db_url, "hasty", "drip_feed", "impatient").exit_code == 0
    assert run(tmp_path, db_url, "plain").exit_code == 0  # the same agent without profiles
    # by hand: 'pedido' 2/2 under the cooperative user, 2/2 impatient, 0/2 drip_feed; 'solo' 2/2 (no user).
    # The headline: 'pedido' and 'solo' cooperative, 4 of 4, pass^1 = pass^2 = 1. Every conversation (a
    # profile's trials a case of their own, as main counted them): 6 of 8, pass^1 = pass^2 = (1+1+0+1)/4 = 0.75
    every = {"scored": 8, "passed": 6, "max_trials": 2, "pass_hat_k": {"1": 0.75, "2": 0.75}}
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        runs = {r["name"]: r for r in client.get("/api/runs").json()["data"]}
        got = {k: runs["hasty"][k] for k in ("scored", "passed", "max_trials", "pass_hat_k", "all_profiles")}
        assert got == {
            "scored": 4,
            "passed": 4,
            "max_trials": 2,
            "pass_hat_k": {"1": 1.0, "2": 1.0},
            "all_profiles": every,
        }
        assert "all_profiles" not in runs["plain"] and (runs["plain"]["passed"], runs["plain"]["scored"]) == (4, 4)
        rid, pid = runs["hasty"]["id"], runs["plain"]["id"]
        figs = client.get(f"/api/runs/{rid}/figures").json()
        assert figs["pass_hat_k"] == {"1": 1.0, "2": 1.0}
        assert figs["all_profiles"] == {"scored": 8, "passed": 6, "pass_hat_k": {"1": 0.75, "2": 0.75}}
        assert "all_profiles" not in client.get(f"/api/runs/{pid}/figures").json()
        blame = client.get(f"/api/runs/{rid}/blame").json()
        assert (blame["scored"], blame["passed"], blame["pass_rate"]) == (4, 4, 1.0)
        # drip_feed's 2 failures are blamed (every conversation), none of the cooperative user's conversations
        assert (sum(blame["by_blame"].values()), blame["headline_blamed_elsewhere"]) == (2, 0)
        assert "headline_blamed_elsewhere" not in client.get(f"/api/runs/{pid}/blame").json()
        page = client.get(f"/runs/{rid}", headers={"accept": "text/html"}).text
        head = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[page.index('id="pass"') : page.index("</div>")]))
        assert "passed 100.0% 4 of 4 trajectories · 0 failed" in head
        assert "the cooperative user's conversations; 4 under other profiles in the cooperation gap" in head
        assert "k=1 1.00 k=2 1.00" in head
        listing = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client.get("/", headers={"accept": "text/html"}).text))
        assert "hasty 8 trajectories 100.0% 4/4 pass^2 1.00 cooperative user" in listing
        # compare and its McNemar count the cooperative conversations only: the same 4 trials, none flipped
        cmp = client.get("/api/compare", params={"a": pid, "b": rid}).json()
        assert (cmp["b"]["passed"], cmp["b"]["scored"], cmp["b"]["all_profiles"]) == (4, 4, every)
        assert cmp["shared_cases"] == 4 and cmp["mcnemar"]["passed_only_a"] == cmp["mcnemar"]["passed_only_b"] == 0
        html = client.get("/compare", params={"a": pid, "b": rid}, headers={"accept": "text/html"}).text
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
        assert "B passed 100.0% 4/4 pass^2 1.00 cooperative user" in text and "B − A +0.0 pts" in text
    shown = runner.invoke(cli, ["show", "hasty", "--db", db_url], env={"COLUMNS": "200"})
    assert "passed 4/4 (100.0%)" in shown.output and "under every profile: passed 6/8 (75.0%)" in shown.output
    assert "pass^k: k=1: 1.0000  k=2: 1.0000" in shown.output
    out = tmp_path / "hasty.jsonl"
    assert runner.invoke(cli, ["export", "hasty", "--out", str(out), "--db", db_url]).exit_code == 0
    scored = runner.invoke(cli, ["score", str(tmp_path / "suite.yaml"), str(out), "--json"])
    data = json.loads(scored.stdout)
    assert data["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert data["all_profiles"] == {"scored": 8, "passed": 6, "pass_hat_k": {"1": 0.75, "2": 0.75}}
    text = runner.invoke(cli, ["score", str(tmp_path / "suite.yaml"), str(out)], env={"COLUMNS": "200"}).output
    assert "passed 4/4 (100.0%)" in text and "pass^k under every profile: k=1: 0.7500  k=2: 0.7500" in text


def test_gate_and_compare_pair_two_profiled_runs_cooperative_conversations(tmp_path: Path, db_url: str) -> None:
    """Two runs with the same profiles: the slow agent passes under every user, the hasty one fails the
    drip-feeding user's 2 conversations. Their headlines (cooperative: 4/4 each) do not differ, and the
    McNemar pairs and the regressed cases are the cooperative conversations' (none); the drip_feed drop
    is the cooperation gap's (main's code called it 2 regressed cases)."""
    assert run(tmp_path, db_url, "slow", "drip_feed", agent="slow").exit_code == 0
    assert run(tmp_path, db_url, "hasty", "drip_feed").exit_code == 0
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        cmp = client.get("/api/compare", params={"a": 1, "b": 2}).json()
        assert [(r["passed"], r["scored"]) for r in (cmp["a"], cmp["b"])] == [(4, 4), (4, 4)]
        assert [r["all_profiles"]["passed"] for r in (cmp["a"], cmp["b"])] == [6, 4]
        assert (cmp["shared_cases"], cmp["mcnemar"]["passed_only_a"], cmp["flipped"]) == (4, 0, [])
        drip = next(r for r in cmp["cooperation"]["profiles"] if r["profile"] == "drip_feed")
        assert (drip["a"], drip["b"], drip["delta"]) == (1.0, 0.0, -1.0)
    md = tmp_path / "gate.md"
    args = ["gate", "--baseline", "slow", "--candidate", "hasty", "--markdown", str(md), "--db", db_url]
    gated = runner.invoke(cli, args, env={"COLUMNS": "300"})
    assert "Cases that regressed (0:" in md.read_text(encoding="utf-8")
    assert "case trials passed in the baseline and fail in the candidate" not in gated.output
    said = "the cases that regressed and the shared case trials count the cooperative user's conversations"
    assert said in gated.output and said in md.read_text(encoding="utf-8")


def test_runs_with_only_non_cooperative_conversations_pair_them_all(tmp_path: Path, db_url: str) -> None:
    """Two imported runs whose every record ran under the drip-feeding user (no cooperative conversation):
    each is counted whole, as a run without profiles, in its headline, the pairing, the blame and the
    labels. By hand: 'pedido' under drip_feed, its records' trials 4 and 5 (after the cooperative ones);
    the slow agent passes both (A, 2/2), the
    hasty one fails both (B, 0/2): 2 shared case trials, both flipped A -> B, McNemar 2/0, and the gate's
    regressed case trials pedido#4 and pedido#5 (main's code paired none: 0 shared, 0/0, no regression)."""
    import json

    assert run(tmp_path, db_url, "slow", "drip_feed", agent="slow").exit_code == 0
    assert run(tmp_path, db_url, "hasty", "drip_feed").exit_code == 0
    for name in ("slow", "hasty"):
        out = tmp_path / f"{name}.jsonl"
        assert runner.invoke(cli, ["export", name, "--out", str(out), "--db", db_url]).exit_code == 0
        lines = [ln for ln in out.read_text(encoding="utf-8").splitlines() if ln.strip()]
        drip = [ln for ln in lines if json.loads(ln).get("user_profile") == "drip_feed"]
        assert len(drip) == 2
        (tmp_path / f"{name}_drip.jsonl").write_text("\n".join(drip) + "\n", encoding="utf-8")
        args = ["import", str(tmp_path / f"{name}_drip.jsonl"), "--run", f"{name}_drip"]
        done = runner.invoke(cli, [*args, "--suite", str(tmp_path / "suite.yaml"), "--db", db_url])
        assert done.exit_code == 0, done.output
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        runs = {r["name"]: r for r in client.get("/api/runs").json()["data"]}
        a, b = runs["slow_drip"], runs["hasty_drip"]
        assert [(r["passed"], r["scored"]) for r in (a, b)] == [(2, 2), (0, 2)]
        cmp = client.get("/api/compare", params={"a": a["id"], "b": b["id"]}).json()
        assert (cmp["shared_cases"], cmp["mcnemar"]["passed_only_a"], cmp["mcnemar"]["passed_only_b"]) == (2, 2, 0)
        assert sorted((f["case_id"], f["trial"], f["a_passed"], f["b_passed"]) for f in cmp["flipped"]) == [
            ("pedido", 4, True, False),
            ("pedido", 5, True, False),
        ]
        blame = client.get(f"/api/runs/{b['id']}/blame").json()
        assert (blame["scored"], blame["passed"]) == (2, 0) and "headline_blamed_elsewhere" not in blame
        listing = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client.get("/", headers={"accept": "text/html"}).text))
        assert "cooperative user" in listing  # the runs made with the cooperative user and drip_feed
        row = listing[listing.index("hasty_drip") : listing.index("hasty_drip") + 80]
        assert "0.0% 0/2" in row and "cooperative user" not in row
        page = client.get(f"/runs/{b['id']}", headers={"accept": "text/html"}).text
        head = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[page.index('id="pass"') : page.index("</div>")]))
        assert "0 of 2 trajectories" in head and "cooperative user" not in head
    md = tmp_path / "gate.md"
    args = ["gate", "--baseline", "slow_drip", "--candidate", "hasty_drip", "--markdown", str(md), "--db", db_url]
    gated = runner.invoke(cli, args, env={"COLUMNS": "300"})
    assert gated.exit_code == 1, gated.output
    assert "2 case trials passed in the baseline and fail in the candidate: pedido#4, pedido#5" in gated.output
    assert "count the cooperative user's conversations" not in gated.output
