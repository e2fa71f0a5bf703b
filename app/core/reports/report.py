"""Aggregating trajectory scores into a report, in the exact shape of
``toollens score --json`` (docs/formats.md).

The aggregate is a set of counters: memory does not grow with the number of
trajectories, apart from the optional per-case list and one counter pair per
distinct case for pass^k, and one entry per simulated-user conversation that
pairing may need (the cooperation gap's paired flips).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, chain, repeat, takewhile
from operator import add, attrgetter, mul, not_, truediv
from typing import Any

from app.core.score.blame import BLAMES
from app.core.score.divergence import cause_key, cause_text
from app.core.score.families import PER_CALL_FAMILIES, RATIO_FAMILIES, RATIO_KEYS, REFERENCE_KEYS, counter_keys
from app.core.score.outcome import OUTCOMES
from app.core.score.scoring import ERROR_SOURCES, TrajectoryScore

COOPERATIVE = "cooperative"  # the simulated user's default profile (app/core/reports/profiles.py)
PROFILE_MARK = "|user:"  # a stored fault key ends with it and the profile when the user was not cooperative


@dataclass(frozen=True, slots=True)
class Ratio:
    """A numerator with its denominator; never reported as a bare ratio."""

    num: int
    den: int

    @property
    def value(self) -> float | None:
        return self.num / self.den if self.den else None

    def to_dict(self) -> dict[str, int]:
        return {"num": self.num, "den": self.den}


def pass_hat_k(trials: Iterable[tuple[int, int]]) -> dict[int, float]:
    """pass^k for k = 1..max n: the mean over cases with n >= k trials of
    C(c, k) / C(n, k), where a case had n trials and c passes.

    C(c, k) / C(n, k) is the product of (c - i) / (n - i) for i < k, built up
    k by k; it is zero once k > c, so a case costs O(c), not O(n^2), and less
    where the product underflows to 0.0 (k of about 600 for 9,035 trials and
    2,800 passes): it stays 0.0 there, and adding 0.0 changes no sum."""
    groups = [(n, c) for n, c in trials if n > 0]
    if not groups:
        return {}
    top = max(n for n, _ in groups)
    sums = [0.0] * (top + 2)
    with_n = [0] * (top + 2)  # with_n[n]: cases with exactly n trials
    for n, c in groups:
        with_n[n] += 1
        m = min(c, n)
        if m > 0:  # ratio_k = ratio_(k-1) * (c-k+1)/(n-k+1) and sums[k] += ratio_k, k = 1..m: the same
            ratios = list(takewhile(bool, accumulate(map(truediv, range(c, c - m, -1), range(n, n - m, -1)), mul)))
            end = len(ratios) + 1  # the operations in the same order as a loop, at C speed
            sums[1:end] = map(add, sums[1:end], ratios)
    eligible = list(accumulate(reversed(with_n[1 : top + 1])))  # cases with n >= k, for k = top..1
    eligible.reverse()
    return dict(zip(range(1, top + 1), map(truediv, sums[1 : top + 1], eligible), strict=True))


def headline_trials(trials: Mapping[tuple[str, str], Sequence[int]]) -> list[tuple[int, int]]:
    """The ``(trials, passed)`` per case that a run's headline (pass rate, pass^k) counts, from its tally
    per ``(case, profile)`` (``Report.trials``; ``""``: no profile or the cooperative one): the cooperative
    conversations only when ``cooperative_only``, so that a profiled run reads as a run made without
    profiles (the others are the cooperation gap's); else every case."""
    if cooperative_only(trials):
        return [(v[0], v[1]) for (_, p), v in trials.items() if not p]
    return [(v[0], v[1]) for v in trials.values()]


def is_profiled(trials: Mapping[tuple[str, str], Sequence[int]]) -> bool:
    """Some trajectory of the tally ran under a non-cooperative simulated-user profile."""
    return any(p for _, p in trials)


def cooperative_only(trials: Mapping[tuple[str, str], Sequence[int]]) -> bool:
    """A run's headline counts the cooperative user's conversations only: some of its trajectories ran
    under no or the cooperative profile and some under another. What pairing, blame's headline figures and
    the "cooperative user" labels follow too; a run whose trajectories all ran under non-cooperative
    profiles is counted whole, as a run without profiles."""
    return is_profiled(trials) and any(not p for _, p in trials)


def pass_totals(tally: Iterable[tuple[int, int]]) -> dict[str, Any]:
    """``all_profiles`` of ``score --json``: the trajectories scored, those passed and pass^k (rounded)."""
    rows = list(tally)
    return {
        "scored": sum(n for n, _ in rows),
        "passed": sum(c for _, c in rows),
        "pass_hat_k": rounded_pass_hat_k(rows),
    }


def rounded_pass_hat_k(trials: Iterable[tuple[int, int]]) -> dict[str, float]:
    """``pass_hat_k`` as reports state it: k as text, each value rounded to 4 digits."""
    values = list(pass_hat_k(trials).values())  # k = 1..top, in order
    end = len(values) - len(list(takewhile(not_, reversed(values))))  # the 0.0s that end it stay 0.0
    rounded = chain(map(round, values[:end], repeat(4)), repeat(0.0, len(values) - end))
    return dict(zip(_k_texts(len(values)), rounded, strict=True))


@lru_cache(maxsize=16)
def _k_texts(top: int) -> tuple[str, ...]:
    """The keys of pass^k as reports state it, "1" to str(top): made once, their hashes with them."""
    return tuple(map(str, range(1, top + 1)))


try:  # what Counter.update runs for an iterable, without its per-call Mapping check
    from _collections import _count_elements as _count  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python implementations

    def _count(counter: Counter[Any], items: Iterable[Any]) -> None:
        counter.update(items)


# A turn's totals, in the order Report.turn_n keeps them: each family's num and den, then two counts.
TURN_KEYS = (*counter_keys(RATIO_FAMILIES), "trajectories", "failed")
_TURN_INDEX = {key: i for i, key in enumerate(TURN_KEYS)}
_WIDTH = len(TURN_KEYS)  # a turn's slots in a TurnTable's counts (app/core/score/turns.py), in that order

# The per-call totals that Report._n keeps, and the TrajectoryScore attributes they add up.
_PER_CALL = counter_keys(PER_CALL_FAMILIES)
_PER_CALL_TOTALS = attrgetter(*(a for f in PER_CALL_FAMILIES for a in (f.num, f.den)))


@dataclass
class Report:
    """Running totals over scored trajectories."""

    keep_cases: bool = True
    _counts: Counter[str] = field(default_factory=Counter)
    _n: list[int] = field(default_factory=lambda: [0] * len(_PER_CALL))  # the per-call totals, in _PER_CALL order
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    hallucinated_names: set[str] = field(default_factory=set)
    outcomes: Counter[str] = field(default_factory=Counter)
    outcomes_by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    outcomes_by_step: Counter[tuple[int, str]] = field(default_factory=Counter)
    violations: Counter[tuple[str, str]] = field(default_factory=Counter)
    pairs_checked: Counter[tuple[str, str]] = field(default_factory=Counter)
    reactions: Counter[tuple[str, str, bool]] = field(default_factory=Counter)
    schema_errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    causes: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # first divergences of failed ones
    trials: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (case, profile) -> [trials, passed]
    profile_trials: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (profile, case), every one
    cooperative_passed: dict[tuple[str, int], bool] = field(default_factory=dict)  # (case, trial) -> passed
    mirrored: list[tuple[str, str, int, bool]] = field(default_factory=list)  # (profile, case, mirrored trial, passed)
    turn_n: dict[int, list[int]] = field(default_factory=dict)  # per turn number, the totals in TURN_KEYS order
    turn_failures: Counter[tuple[int, str]] = field(default_factory=Counter)  # (turn, failure name)
    agent_errors: Counter[str] = field(default_factory=Counter)  # what the agent raised, by exception type
    cases: list[dict[str, Any]] = field(default_factory=list)
    trajectories: int = 0

    def add(self, ts: TrajectoryScore) -> None:
        self.trajectories += 1
        if ts.agent_error is not None:
            self.agent_errors[str(ts.agent_error.get("type") or "")] += 1
        if ts.blame is not None:  # who failed the conversation (app/core/score/blame.py)
            self._counts[f"blame.{ts.blame['blame']}"] += 1
        profile = ts.user_profile
        if profile is not None:  # the cooperation gap counts every conversation, the user's broken ones too
            self._add_profile(ts, profile)
        if ts.user_error:  # the simulated user's fault: listed and counted, never held against the agent
            self._counts["user_errors"] += 1
            if self.keep_cases:
                self.cases.append(_case_entry(ts))
            return
        if ts.has_reference:
            self._counts["with_reference"] += 1
        n = self._n
        for i, v in enumerate(_PER_CALL_TOTALS(ts)):
            n[i] += v
        _count(self.confusion, ts.confusion)
        for cs in ts.calls if ts.any_error else ():
            if not cs.exists:
                self.hallucinated_names.add(cs.name)
            elif cs.schema_error is not None:
                self.schema_errors[(cs.name, cs.schema_error.field)] += 1
            if cs.reaction is not None:
                r = cs.reaction
                self.reactions[(r.error_kind, r.reaction, r.acceptable)] += 1
        if ts.outcome is not None:
            c = self._counts
            c["recovery.den"] += 1
            c["hallucination_after_error.den"] += 1
            self.outcomes[ts.outcome.outcome] += 1
            self.outcomes_by_kind[(ts.fault_kind or "error", ts.outcome.outcome)] += 1
            self.outcomes_by_step[(ts.fault_step or 0, ts.outcome.outcome)] += 1
            source = ts.fault_source or "tool"
            c[f"recovery.{source}.den"] += 1
            if ts.outcome.outcome == "recovered":
                c["recovery.num"] += 1
                c[f"recovery.{source}.num"] += 1
            elif ts.outcome.outcome == "hallucinated":
                c["hallucination_after_error.num"] += 1
                c[f"hallucination_after_error.{source}.num"] += 1
        elif ts.fault_not_reached is not None:
            self._counts["faults_not_reached"] += 1
        if ts.pairs_checked:
            _count(self.pairs_checked, ts.pairs_checked)
        if ts.violations:
            _count(self.violations, ts.violations)
        if ts.failures:
            _count(self.failures, ts.failures)
        d = ts.divergence
        if d is not None:
            self.causes[d.cause] += 1
        if ts.turns is not None:
            self._add_turns(ts)
        # docs/metrics.md: per case, over all its trials; a non-cooperative user's trials are a case of their
        # own, out of the headline (``headline_trials``) and in the cooperation gap
        key = (ts.case_id, "" if profile is None or profile == COOPERATIVE else profile)
        tally = self.trials.setdefault(key, [0, 0])
        tally[0] += 1
        tally[1] += ts.passed
        if self.keep_cases:
            self.cases.append(_case_entry(ts))

    def _add_profile(self, ts: TrajectoryScore, profile: str) -> None:
        """A conversation under a simulated-user profile: its pass, whether the profile's act fired,
        whether the user broke it, and its blame (the cooperation gap, app/core/reports/profiles.py)."""
        tally = self.profile_trials.setdefault((profile, ts.case_id), [0, 0])
        tally[0] += 1
        tally[1] += ts.passed
        if profile == COOPERATIVE:
            self.cooperative_passed[(ts.case_id, ts.trial)] = ts.passed
        elif ts.user_mirror_trial is not None:  # the record names the cooperative trial it mirrors
            self.mirrored.append((profile, ts.case_id, ts.user_mirror_trial, ts.passed))
        c = self._counts
        if ts.user_acts:
            c[f"profile.{profile}.acted"] += 1
        if ts.user_error:
            c[f"profile.{profile}.user_errors"] += 1
        if ts.blame is not None:
            c[f"profile.{profile}.blame.{ts.blame['blame']}"] += 1

    def paired(self) -> dict[str, list[int]]:
        """Per profile whose records name the cooperative trial they mirror (``user_mirror_trial``),
        ``[passed only in that trial, passed only under the profile]`` over the pairs found."""
        out: dict[str, list[int]] = {}
        for profile, case_id, mirror, ok in self.mirrored:
            pair = out.setdefault(profile, [0, 0])
            ref = self.cooperative_passed.get((case_id, mirror))
            if ref is not None and ref != ok:
                pair[0 if ref else 1] += 1
        return out

    def profiles_json(self) -> dict[str, dict[str, Any]]:
        """``profiles`` of ``score --json``: per simulated-user profile, its trials per case
        (``[n, passed]``), the conversations where its act fired, those the user broke, the
        failed ones by blame and, when its records name their mirrors, its ``paired`` flips."""
        out: dict[str, dict[str, Any]] = {}
        c = self.counts
        pairs = self.paired()
        for (profile, case_id), (n, passed) in sorted(self.profile_trials.items()):
            entry = out.get(profile)
            if entry is None:
                entry = out[profile] = {
                    "trials": {},
                    "acted": c[f"profile.{profile}.acted"],
                    "user_errors": c[f"profile.{profile}.user_errors"],
                    "blame": {b: c[f"profile.{profile}.blame.{b}"] for b in BLAMES},
                }
            entry["trials"][case_id] = [n, passed]
        for profile, pair in pairs.items():
            if profile in out:
                out[profile]["paired"] = pair
        return out

    def _add_turns(self, ts: TrajectoryScore) -> None:
        """A conversation's per-turn figures and failures, by turn number."""
        table = ts.turns
        if table is None:
            return
        per = self.turn_n
        counts = table.counts
        for t in range(1, table.n + 1):
            part = counts[(t - 1) * _WIDTH : t * _WIDTH]
            row = per.get(t)
            if row is None:
                per[t] = part
            else:
                row[:] = map(add, row, part)
        for t in sorted(table.failures):
            for f in table.failures[t]:
                self.turn_failures[(t, f)] += 1

    @property
    def counts(self) -> Counter[str]:
        """Every running total by name ("selection_precision.num", …)."""
        self._settle()
        return self._counts

    def _settle(self) -> None:
        """Move the fast per-call totals into the named ones."""
        for key, v in zip(_PER_CALL, self._n, strict=True):
            if v:
                self._counts[key] += v
        self._n = [0] * len(_PER_CALL)

    # -- flat counters: what a store adds up, batch after batch -------------

    def counters(self) -> Iterator[tuple[str, str, str, str, int]]:
        """Every running total as a ``(kind, a, b, c, value)`` row. Totals add:
        the counters of two reports summed are the counters of their union."""
        self._settle()
        yield ("count", "trajectories", "", "", self.trajectories)
        for key, v in self.counts.items():
            yield ("count", key, "", "", v)
        for (e, c), v in self.confusion.items():
            yield ("confusion", e, c, "1" if c in self.hallucinated_names else "", v)
        for (k, o), v in self.outcomes_by_kind.items():
            yield ("outcome", k, o, "", v)
        for (step, o), v in self.outcomes_by_step.items():
            yield ("outcome_step", str(step), o, "", v)
        for (a, b), v in self.pairs_checked.items():
            yield ("pair_checked", a, b, "", v)
        for (a, b), v in self.violations.items():
            yield ("pair_violated", a, b, "", v)
        for (k, r, ok), v in self.reactions.items():
            yield ("reaction", k, r, "1" if ok else "0", v)
        for (t, f), v in self.schema_errors.items():
            yield ("schema_error", t, f, "", v)
        for name, v in self.failures.items():
            yield ("failure", name, "", "", v)
        for (kind, tool, other), v in self.causes.items():
            yield ("cause", kind, tool, other, v)
        for turn, row in self.turn_n.items():
            for key, v in zip(TURN_KEYS, row, strict=True):
                yield ("turn", str(turn), key, "", v)
        for (turn, name), v in self.turn_failures.items():
            yield ("turn", str(turn), f"failure:{name}", "", v)
        for kind, v in self.agent_errors.items():
            yield ("agent_error", kind, "", "", v)
        for (case_id, fault), (n_trials, n_passed) in self.trials.items():
            yield ("trials", case_id, fault, "", n_trials)
            yield ("passes", case_id, fault, "", n_passed)
        for (profile, case_id), (n_trials, n_passed) in self.profile_trials.items():
            yield ("profile_trials", profile, case_id, "", n_trials)
            yield ("profile_passes", profile, case_id, "", n_passed)

    @classmethod
    def from_counters(cls, rows: Iterable[tuple[str, str, str, str, int]]) -> Report:
        """Rebuild a report (without its per-case list) from counter rows."""
        r = cls(keep_cases=False)
        for kind, a, b, c, v in rows:
            if kind == "count":
                if a == "trajectories":
                    r.trajectories += v
                else:
                    r.counts[a] += v
            elif kind == "confusion":
                r.confusion[(a, b)] += v
                if c == "1":
                    r.hallucinated_names.add(b)
            elif kind == "outcome":
                r.outcomes_by_kind[(a, b)] += v
                r.outcomes[b] += v
            elif kind == "outcome_step":
                r.outcomes_by_step[(int(a), b)] += v
            elif kind == "pair_checked":
                r.pairs_checked[(a, b)] += v
            elif kind == "pair_violated":
                r.violations[(a, b)] += v
            elif kind == "reaction":
                r.reactions[(a, b, c == "1")] += v
            elif kind == "schema_error":
                r.schema_errors[(a, b)] += v
            elif kind == "failure":
                r.failures[a] += v
            elif kind == "cause":
                r.causes[(a, b, c)] += v
            elif kind == "turn":
                if b.startswith("failure:"):
                    r.turn_failures[(int(a), b[8:])] += v
                elif b in _TURN_INDEX:
                    r.turn_n.setdefault(int(a), [0] * len(TURN_KEYS))[_TURN_INDEX[b]] += v
            elif kind == "agent_error":
                r.agent_errors[a] += v
            elif kind in ("trials", "passes"):
                tally = r.trials.setdefault((a, b), [0, 0])
                tally[0 if kind == "trials" else 1] += v
            elif kind in ("profile_trials", "profile_passes"):
                tally = r.profile_trials.setdefault((a, b), [0, 0])
                tally[0 if kind == "profile_trials" else 1] += v
        return r

    def turns_json(self) -> dict[str, dict[str, Any]]:
        """``turns`` of ``score --json``: per turn number, the families
        (num/den), the conversations that had the turn, those with a failure
        in it, and the failures by name."""
        out: dict[str, dict[str, Any]] = {}
        for turn in sorted(self.turn_n):
            totals = dict(zip(TURN_KEYS, self.turn_n[turn], strict=True))
            entry: dict[str, Any] = {f: {"num": totals[f"{f}.num"], "den": totals[f"{f}.den"]} for f in RATIO_KEYS}
            entry["trajectories"] = totals["trajectories"]
            entry["failed"] = totals["failed"]
            entry["failures"] = {name: v for (t, name), v in sorted(self.turn_failures.items()) if t == turn and v}
            out[str(turn)] = entry
        return out

    def causes_json(self) -> list[dict[str, Any]]:
        """``causes``: each failed trajectory counted once, under its first
        divergence, largest first; ``filter`` lists exactly those trajectories."""
        return [
            {
                "text": cause_text(kind, tool, other),
                "count": n,
                "filter": {"cause": cause_key(kind, tool, other)},
                "kind": kind,
                "tool": tool,
                "other": other,
            }
            for (kind, tool, other), n in sorted(self.causes.items(), key=lambda kv: (-kv[1], kv[0]))
            if n
        ]

    def ratio(self, family: str) -> Ratio:
        self._settle()
        return Ratio(self.counts[f"{family}.num"], self.counts[f"{family}.den"])

    def by_source(self) -> dict[str, dict[str, dict[str, int]]]:
        """Recovery and hallucination after error split by what made the
        faulted call fail (``ERROR_SOURCES``): the parts add up to the whole."""
        c = self.counts
        return {
            source: {
                "recovery": {"num": c[f"recovery.{source}.num"], "den": c[f"recovery.{source}.den"]},
                "hallucination_after_error": {
                    "num": c[f"hallucination_after_error.{source}.num"],
                    "den": c[f"recovery.{source}.den"],
                },
            }
            for source in ERROR_SOURCES
        }

    def pass_hat_k(self) -> dict[int, float]:
        """The headline's pass^k: a profiled run's cooperative conversations only (``headline_trials``)."""
        return pass_hat_k(headline_trials(self.trials))

    @property
    def profiled(self) -> bool:
        """Some scored trajectory ran under a non-cooperative simulated-user profile."""
        return is_profiled(self.trials)

    def rounded_pass_hat_k(self) -> list[float]:
        """pass^k as ``to_json`` states it, for k = 1, 2, ... in order (what a finished run keeps)."""
        return list(rounded_pass_hat_k(headline_trials(self.trials)).values())

    def to_json(self, *, kept_pass_hat_k: dict[str, float] | None = None) -> dict[str, Any]:
        """The report object of docs/formats.md, with compatible extensions (extra keys only).
        ``kept_pass_hat_k``: its ``pass_hat_k`` as computed already (kept with a finished run)."""
        out: dict[str, Any] = {f: self.ratio(f).to_dict() for f in RATIO_KEYS}
        with_reference = self.counts["with_reference"]
        if self.trajectories and not with_reference:  # traces without expected calls: said, not 0 / 0
            for key in REFERENCE_KEYS:
                if not out[key]["den"]:
                    out[key]["no_reference"] = True
        out["dependency_violations"] = [
            {"before": a, "after": b, "count": self.violations[(a, b)], "checked": n}
            for (a, b), n in sorted(self.pairs_checked.items(), key=lambda kv: (-self.violations[kv[0]], kv[0]))
            if self.violations[(a, b)]
        ]
        out["dependency_checks"] = sum(self.pairs_checked.values())  # F5's denominator: order pairs checked
        out["confusion"] = [
            {"expected": e, "called": c, "count": n, "hallucinated": c in self.hallucinated_names}
            for (e, c), n in sorted(self.confusion.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        out["outcomes"] = {o: self.outcomes[o] for o in OUTCOMES}
        out["pass_hat_k"] = (
            kept_pass_hat_k if kept_pass_hat_k is not None else rounded_pass_hat_k(headline_trials(self.trials))
        )
        out["cases"] = list(self.cases)
        out["trajectories"] = self.trajectories
        out["faults_not_reached"] = self.counts["faults_not_reached"]  # planned faults the agent never reached
        out["failures"] = dict(sorted(self.failures.items()))
        out["user_errors"] = self.counts["user_errors"]  # conversations the simulated user broke: not scored
        out["agent_errors"] = {k: v for k, v in sorted(self.agent_errors.items(), key=lambda kv: (-kv[1], kv[0])) if v}
        out["with_reference"] = with_reference  # trajectories whose case has expected calls
        blamed = {b: self.counts[f"blame.{b}"] for b in BLAMES}
        if any(blamed.values()):  # failed conversations by who failed them (docs/blame.md)
            out["blame"] = blamed
        out["causes"] = self.causes_json()
        if self.turn_n:
            out["turns"] = self.turns_json()
        if self.profile_trials:  # conversations with a simulated user, by its profile (the cooperation gap)
            out["profiles"] = self.profiles_json()
        if self.profiled:  # the headline counts the cooperative conversations; every one's figures kept here
            out["all_profiles"] = pass_totals((n, c) for n, c in self.trials.values())
        out["outcomes_by_fault_kind"] = [
            {"kind": k, "outcome": o, "count": n} for (k, o), n in sorted(self.outcomes_by_kind.items())
        ]
        out["outcomes_by_step"] = [
            {"step": s, "outcome": o, "count": n} for (s, o), n in sorted(self.outcomes_by_step.items())
        ]
        out["recovery_by_source"] = self.by_source()
        out["reactions"] = [
            {"error_kind": k, "reaction": r, "acceptable": a, "count": n}
            for (k, r, a), n in sorted(self.reactions.items())
        ]
        out["schema_errors"] = [
            {"tool": t, "field": f, "count": n}
            for (t, f), n in sorted(self.schema_errors.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        return out


def _case_entry(ts: TrajectoryScore) -> dict[str, Any]:
    """One trajectory's line in ``cases``."""
    out: dict[str, Any] = {
        "case_id": ts.case_id,
        "trial": ts.trial,
        "passed": ts.passed,
        "failures": list(ts.failures),
        "fault": ts.fault_dict(),
        "outcome": None if ts.outcome is None else ts.outcome.outcome,
    }
    if ts.fault_not_reached is not None:
        out["fault_not_reached"] = {"step": ts.fault_not_reached[0], "kind": ts.fault_not_reached[1]}
    if ts.turns is not None:
        out["failures_by_turn"] = {str(t): list(names) for t, names in sorted(ts.turns.failures.items())}
    if ts.user_error:
        out["user_error"] = ts.user_error
    if ts.agent_error is not None:
        out["agent_error"] = ts.agent_error
    if ts.user_profile is not None:
        out["user_profile"] = ts.user_profile
    if ts.blame is not None:  # who failed it (app/core/score/blame.py)
        out["blame"] = ts.blame["blame"]
        out["blame_evidence"] = ts.blame["evidence"]
        out["blame_confidence"] = ts.blame["confidence"]
    return out
