"""Simulated-user profiles and the cooperation gap (docs/runner.md#user-profiles).

A profile is how ToolLens's own simulated user departs from the cooperative
one: it ends early, drip-feeds its facts, starts from a wrong value, omits a
fact, or changes its mind, each at a documented rate (the behaviour itself is
in ``app.agents.profiles``). The cooperation gap is pass^k under each profile
minus pass^k under the cooperative user, on the same cases; the band is the
spread of the non-cooperative profiles. Pure: no store, no web.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import ToolLensError
from app.core.reports.report import COOPERATIVE as COOPERATIVE
from app.core.reports.report import pass_hat_k
from app.core.reports.stats import mcnemar_exact, newcombe_interval


@dataclass(frozen=True)
class Profile:
    """A profile's name, what it does in a sentence, and its rate (the chance its act fires)."""

    name: str
    summary: str
    rate: float
    index: int  # its place in PROFILES: fixes its trial numbers, whatever order a run lists profiles in


PROFILES: tuple[Profile, ...] = (
    Profile(COOPERATIVE, "gives each known fact when asked, confirms when asked, leaves when served", 1.0, 0),
    Profile(
        "impatient",
        "from its 2nd reply on, leaves (goodbye and stop) when the agent asks instead of "
        "serving, with probability 0.5 at each such turn",
        0.5,
        1,
    ),
    Profile(
        "drip_feed", "gives at most one fact per reply: other facts asked together come one per later reply", 1.0, 2
    ),
    Profile(
        "wrong_assumption",
        "the first fact it gives is wrong (one character changed), corrected at the "
        "start of its next reply; in a conversation with probability 0.5",
        0.5,
        3,
    ),
    Profile(
        "omits_detail",
        "the first time it is asked for a fact, says it does not have it at hand; gives it "
        "when asked again; in a conversation with probability 0.5",
        0.5,
        4,
    ),
    Profile(
        "changes_mind",
        "declines the first confirmation it is asked for, then takes that back in its next "
        "reply and confirms; in a conversation with probability 0.5",
        0.5,
        5,
    ),
)
BY_NAME = {p.name: p for p in PROFILES}
NAMES = tuple(p.name for p in PROFILES)
ACT_KINDS = ("ended_early", "held_back", "wrong_value", "corrected", "withheld", "declined", "took_back")


class ProfileError(ToolLensError):
    """``--user-profile`` names no profile."""


def parse_profiles(values: Iterable[str]) -> list[str]:
    """``--user-profile`` values (repeatable, each a name or a comma list; ``all``) as the
    profiles to run, in PROFILES order, cooperative first whenever any is named (the reference)."""
    wanted: set[str] = set()
    for value in values:
        for name in (v.strip().lower().replace("-", "_") for v in value.split(",")):
            if not name:
                continue
            if name == "all":
                wanted.update(NAMES)
            elif name in BY_NAME:
                wanted.add(name)
            else:
                raise ProfileError(f"--user-profile {name!r}: not a profile ({', '.join(NAMES)}, or all)")
    if wanted:
        wanted.add(COOPERATIVE)
    return [n for n in NAMES if n in wanted]


# -- the cooperation gap ------------------------------------------------------


@dataclass
class ProfileRow:
    """One profile's figures on the run's simulated-user conversations."""

    profile: str
    summary: str
    rate: float
    conversations: int
    passed: int
    cases: int
    pass_hat_k: dict[int, float]
    acted: int = 0  # conversations where the profile's act fired at least once
    user_errors: int = 0  # conversations check_user found broken by the user
    blame: dict[str, int] = field(default_factory=dict)  # failed conversations by blame
    gap_1: float | None = None  # pass^1 − the cooperative pass^1
    gap_1_ci: tuple[float, float] | None = None  # its 95% interval (Newcombe, trials taken as independent)
    gap_k: float | None = None  # pass^k − the cooperative pass^k, at the gap's k
    paired: tuple[int, int] | None = None  # vs the cooperative trial each mirrors: passed only there, only here
    paired_p: float | None = None  # exact McNemar on those pairs

    def at(self, k: int) -> float | None:
        return self.pass_hat_k.get(k)

    @property
    def failed(self) -> int:
        return self.conversations - self.passed

    @property
    def blamed_on_user(self) -> int:
        return self.blame.get("user", 0)


@dataclass
class CooperationGap:
    """pass^k under each profile against the cooperative user, and the band of the others."""

    k: int  # the k every profile reaches (the fewest trials of a case, over the profiles)
    rows: list[ProfileRow]
    band_k: tuple[float, float] | None = None  # min, max pass^k over the non-cooperative profiles
    band_gap: tuple[float, float] | None = None  # min, max gap at k over them

    @property
    def cooperative(self) -> ProfileRow | None:
        return next((r for r in self.rows if r.profile == COOPERATIVE), None)

    @property
    def others(self) -> list[ProfileRow]:
        return [r for r in self.rows if r.profile != COOPERATIVE]

    @property
    def spread(self) -> float | None:
        return None if self.band_k is None else self.band_k[1] - self.band_k[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "band_k": None if self.band_k is None else list(self.band_k),
            "band_gap": None if self.band_gap is None else list(self.band_gap),
            "spread": self.spread,
            "profiles": [
                {
                    "profile": r.profile,
                    "rate": r.rate,
                    "conversations": r.conversations,
                    "passed": r.passed,
                    "cases": r.cases,
                    "pass_hat_k": {str(k): round(v, 4) for k, v in r.pass_hat_k.items()},
                    "acted": r.acted,
                    "user_errors": r.user_errors,
                    "blame": dict(r.blame),
                    "gap_1": r.gap_1,
                    "gap_1_ci": None if r.gap_1_ci is None else list(r.gap_1_ci),
                    "gap_k": r.gap_k,
                    "paired": None if r.paired is None else list(r.paired),
                    "paired_p": r.paired_p,
                }
                for r in self.rows
            ],
        }


def cooperation_gap(profiles: Mapping[str, Mapping[str, Any]]) -> CooperationGap | None:
    """The gap from a report's ``profiles`` (``score --json``): per profile its
    ``trials`` ({case: [n, passed]}), ``acted``, ``user_errors``, ``blame`` and, when known,
    ``paired`` ([passed only in the cooperative trial it mirrors, passed only under the profile]).
    None without cooperative conversations; their row alone when no other profile ran."""
    rows: list[ProfileRow] = []
    for name in [*(n for n in NAMES if n in profiles), *sorted(set(profiles) - set(NAMES))]:
        data = profiles[name]
        trials = {str(c): (int(v[0]), int(v[1])) for c, v in (data.get("trials") or {}).items()}
        known = BY_NAME.get(name)
        rows.append(
            ProfileRow(
                profile=name,
                summary=known.summary if known else "",
                rate=known.rate if known else 0.0,
                conversations=sum(n for n, _ in trials.values()),
                passed=sum(c for _, c in trials.values()),
                cases=len(trials),
                pass_hat_k=pass_hat_k(trials.values()),
                acted=int(data.get("acted") or 0),
                user_errors=int(data.get("user_errors") or 0),
                blame={str(b): int(v) for b, v in (data.get("blame") or {}).items() if v},
            )
        )
        pair = data.get("paired")
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            rows[-1].paired = (int(pair[0]), int(pair[1]))
            rows[-1].paired_p = mcnemar_exact(int(pair[0]), int(pair[1]))
    coop = next((r for r in rows if r.profile == COOPERATIVE), None)
    if coop is None or not coop.conversations:
        return None
    k = min(max(r.pass_hat_k) for r in rows if r.pass_hat_k) if all(r.pass_hat_k for r in rows) else 1
    for r in rows:
        if r is coop or not r.conversations:
            continue
        r.gap_1 = r.passed / r.conversations - coop.passed / coop.conversations
        r.gap_1_ci = newcombe_interval(coop.passed, coop.conversations, r.passed, r.conversations)
        mine, ref = r.at(k), coop.at(k)
        r.gap_k = None if mine is None or ref is None else mine - ref
    others = [r for r in rows if r is not coop and r.at(k) is not None]
    band = (min(r.at(k) or 0.0 for r in others), max(r.at(k) or 0.0 for r in others)) if others else None
    gaps = [r.gap_k for r in others if r.gap_k is not None]
    return CooperationGap(k, rows, band, (min(gaps), max(gaps)) if gaps else None)
