"""The blame against known injected user faults: every profile of the
rule-based simulated user (app/agents/profiles.py) over the simulated-user
cases of examples/conversaciones_v2.yaml, played against two deterministic
agents, and, for each failed conversation, what the profile did (its acts)
beside who the blame charges (docs/blame.md#profiles-as-a-cross-check).

    .venv/bin/python bench/profiles_blame.py             # 40 trials per case and profile, both agents
    .venv/bin/python bench/profiles_blame.py --trials 10 --seed 3

The agents:
- ``literal``: reads the values it needs from what the user said (the last value
  written like each known fact), asks for every missing one in one message, asks
  to confirm an irreversible tool and acts only on a confirmation, then makes the
  case's expected calls with the values it heard. It re-asks once.
- ``once``: the same, but it asks once and then gives up (hands over to a person).
- ``simulated``: the simulated agent with every error rate at 0 (it holds the
  reference values itself, so only ending early, holding back and declining
  reach it).

A failure is caused by the profile when its act fired and the cooperative
user's conversation of the same case and trial (the same agent, seeded alike)
passed. Of those, a failure is unrecoverable when no agent could undo the act:
the user left (``ended_early``) or the agent had acted on a wrong value before
the correction (``wrong_value`` and a call made on it). The other acts leave
the agent a way to succeed (ask again, wait, ask to confirm again).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.agents.profiles import ProfiledUser
from app.agents.simulated import SimRates, SimulatedAgent
from app.agents.users import RuleUser
from app.core.records import Trajectory
from app.core.reports.profiles import COOPERATIVE, NAMES
from app.core.run.conversation import fold
from app.core.run.router import Toolbox
from app.core.run.runner import run_case
from app.core.score.scoring import Scorer
from app.core.suites.suite import Case, Suite, load_suite

SUITE = Path(__file__).resolve().parents[1] / "examples" / "conversaciones_v2.yaml"
AGENTS = ("literal", "once", "simulated")


def _shape(value: str) -> re.Pattern[str]:
    parts = [r"\d" if ch.isdigit() else "[A-Za-z]" if ch.isalpha() else re.escape(ch) for ch in value]
    return re.compile(r"(?<![\w-])" + "".join(parts) + r"(?![\w-])")


class Literal:
    """A deterministic agent that acts on what the user said, not on the reference."""

    def __init__(self, suite: Suite, asks: int = 2):
        self.suite = suite
        self.by_question = {c.question: c for c in suite.cases if c.user is not None}
        self.max_asks = asks

    def __call__(self, question: str, toolbox: Toolbox) -> str:
        msgs = toolbox.messages
        case = self.by_question[msgs[0]["content"]]
        assert case.user is not None
        users = [m["content"] for m in msgs if m["role"] == "user"]
        mine = [m["content"] for m in msgs if m["role"] == "assistant"]
        heard: dict[str, str] = {}
        for name, value in case.user.known.items():
            for text in users:
                for found in _shape(str(value)).findall(text):
                    heard[name] = found  # the last one said wins: a correction replaces a mistake
        needed = [
            n
            for n, v in case.user.known.items()
            if any(str(v) in json.dumps(s.arguments, ensure_ascii=False) for s in case.expected_calls or [])
        ]
        missing = [n for n in needed if n not in heard]
        asks = sum(1 for t in mine if t.startswith("¿Me das"))
        if missing and asks < self.max_asks:
            return f"¿Me das tu {' y tu '.join(missing)}?"
        if missing:
            return "No puedo seguir sin esos datos, te derivo con un ejecutivo."
        steps = case.expected_calls or []
        irreversible = [
            s
            for s in steps
            if (t := self.suite.toolset.get(s.name)) is not None
            and (t.destructive or "irreversible" in fold(t.description))
        ]
        last = fold(users[-1])
        if irreversible and "confirmo" not in last and not last.startswith("si"):
            if mine and mine[-1].startswith("¿Confirmas") and last.startswith("no"):
                return "Entendido, no la emito."
            if not (mine and mine[-1] == "Entendido, no la emito." and "confirmo" not in last):
                return f"¿Confirmas que ejecuto {irreversible[0].name}?"
        seen = []
        for step in steps:
            args = json.loads(json.dumps(step.arguments, ensure_ascii=False))
            for key, value in args.items():
                for name, true in case.user.known.items():
                    if value == true and name in heard:
                        args[key] = heard[name]
            seen.append(str(toolbox.call(step.name, args)))
        return "Listo: " + " ".join(seen)


def rows(agent: str, trials: int, seed: int) -> list[dict[str, Any]]:
    suite = load_suite(SUITE)
    scorer = Scorer(suite)
    out = []
    sim = SimulatedAgent(
        suite.toolset,
        rates=SimRates.parse("confusion=0,hallucinated_tool=0,schema_error=0,wrong_value=0,order=0,skip=0"),
        seed=seed,
    )
    literal = Literal(suite, asks=1 if agent == "once" else 2)
    for profile in NAMES:
        user = RuleUser() if profile == COOPERATIVE else ProfiledUser(profile, seed)
        for case in suite.cases:
            if case.user is None:
                continue
            for t in range(trials):
                who = sim.for_case(case, t) if agent == "simulated" else literal
                traj: Trajectory = run_case(who, suite, case, trial=t, user=user)
                ts = scorer.score(traj)
                acts = [a.kind for a in traj.user_acts or []]
                out.append(
                    {
                        "profile": profile,
                        "case": case.id,
                        "trial": t,
                        "passed": ts.passed,
                        "acts": acts,
                        "user_caused": user_caused(traj, case),
                        "blame": None if ts.blame is None else ts.blame["blame"],
                        "detector": None if ts.blame is None else ts.blame["detector"],
                    }
                )
    return out


def user_caused(traj: Trajectory, case: Case) -> bool:
    """The profile's act is one no agent could undo: the user left, or the agent acted on a
    wrong value before the correction came."""
    kinds = [a.kind for a in traj.user_acts or []]
    if "ended_early" in kinds:
        return True
    if "wrong_value" in kinds and case.user is not None:
        true = {str(v) for v in case.user.known.values()}
        return any(
            isinstance(v, str) and v not in true and _looks_like_known(v, true)
            for c in traj.calls
            for v in c.arguments.values()
        )
    return False


def _looks_like_known(value: str, true: set[str]) -> bool:
    return any(_shape(t).fullmatch(value) for t in true)


def table(found: list[dict[str, Any]]) -> str:
    """Per profile: its failures the profile caused (it acted, and the cooperative user's run of
    the same case and trial, with the same agent, passed), and who the blame charges for them."""
    coop = {(r["case"], r["trial"]): r["passed"] for r in found if r["profile"] == COOPERATIVE}
    lines = [
        "| profile | conversations | failed | caused by the profile | blamed on user | of them unrecoverable "
        "(left, or a call on the wrong value): blamed on user | detectors on the caused |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for profile in NAMES[1:]:
        mine = [r for r in found if r["profile"] == profile]
        failed = [r for r in mine if not r["passed"]]
        caused = [r for r in failed if r["acts"] and coop.get((r["case"], r["trial"]))]
        hard = [r for r in caused if r["user_caused"]]
        det = Counter(f"{r['blame']}:{r['detector']}" for r in caused)
        lines.append(
            f"| {profile} | {len(mine)} | {len(failed)} | {len(caused)} | "
            f"{sum(r['blame'] == 'user' for r in caused)} | "
            f"{sum(r['blame'] == 'user' for r in hard)} / {len(hard)} | "
            f"{', '.join(f'{k} {v}' for k, v in det.most_common()) or '—'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--agent", choices=(*AGENTS, "all"), default="all")
    args = parser.parse_args()
    for agent in AGENTS if args.agent == "all" else (args.agent,):
        print(f"## agent: {agent} ({args.trials} trials per case and profile, seed {args.seed})\n")
        print(table(rows(agent, args.trials, args.seed)))
        print()


if __name__ == "__main__":
    main()
