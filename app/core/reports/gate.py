"""The CI gate: a candidate run against a baseline run.

Hallucinated tools and hallucination after an error must be zero in the
candidate (blocking, docs/metrics.md: any non-zero value is a bug). Every other
family may not get worse than the baseline by more than its tolerance.
The decision is made here from figures the store already holds; rendering
lives in ``app.core.reports.gate_report``.

``gate.yaml``::

    tolerance:                  # the largest allowed drop, in ratio points (0.02 = 2 points)
      selection_precision: 0.02
      selection_recall: 0.02
      schema_validity: 0.02
      argument_accuracy: 0.02
      recovery: 0.05
      dependency_violations: 0  # allowed increase in violations per checked trajectory (0.05 = 5 per 100)
      cost_usd: +10%            # optional, off by default: cost per trajectory may grow by 10%
      model_latency_p95: +20%   # optional: the p95 of model request latency
      tool_latency_p95: +20%    # optional: the p95 of tool call latency
    recovery_sources: [injected, tool, schema, unknown_tool]  # the errors F4 counts (default: all of them)
    simulator_share: 0.10       # above this share of the flipped cases' failures blamed on the
                                # simulated user, the gate gives no verdict (exit 3, docs/blame.md)

Keys left out keep their default; an unknown key is an error. The blocking
families take no tolerance. A family measured in the baseline and not in the
candidate (no denominator) fails as "not measured in candidate": a candidate
that stopped exercising a family cannot pass on it. Dependency violations
compare as a rate, violations per checked trajectory (every stored trajectory
is checked against the toolset's dependency pairs), so runs of different
sizes compare fairly. Cost and latency are gated only when a tolerance is
given, as a relative increase (``+10%``): cost per trajectory (the run's
priced cost over its trajectories) and the p95 latencies; a figure the
baseline has and the candidate lacks fails as "not measured in candidate".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from app.core.errors import ToolLensError
from app.core.reports.wording import fraction
from app.core.score.blame import DEFAULT_SIMULATOR_SHARE, simulator_note
from app.core.score.families import BLOCKING_KEYS, FAMILIES, TOLERATED_KEYS, family_of
from app.core.score.scoring import ERROR_SOURCES

BLOCKING = BLOCKING_KEYS
TOLERATED = TOLERATED_KEYS
DEFAULT_TOLERANCE: dict[str, float] = {f.key: f.tolerance for f in FAMILIES if f.tolerance is not None}
DEFAULT_DEPENDENCY_TOLERANCE = 0.0
USAGE_TOLERATED = ("cost_usd", "model_latency_p95", "tool_latency_p95")  # relative increases, off by default
FAMILY_TITLES = {
    **{f.key: f.title for f in FAMILIES if f.code},
    "cost_usd": "cost per trajectory",
    "model_latency_p95": "model latency p95",
    "tool_latency_p95": "tool latency p95",
}


class GateConfigError(ToolLensError):
    """A gate.yaml that cannot be used."""


@dataclass(frozen=True)
class GateConfig:
    tolerance: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    dependency_violations: float = DEFAULT_DEPENDENCY_TOLERANCE  # violations per checked trajectory
    usage: dict[str, float] = field(default_factory=dict)  # cost/latency key -> allowed relative increase
    # what made the faulted call fail, for the F4 families (recovery, hallucination after error): all by default
    recovery_sources: tuple[str, ...] = ERROR_SOURCES
    # above this share of the flipped cases' failures blamed on the simulated user, no verdict (docs/blame.md)
    simulator_share: float = DEFAULT_SIMULATOR_SHARE


def parse_gate_config(raw: Any, *, path: str = "gate.yaml") -> GateConfig:
    """Read the documented shape; anything else names the key at fault."""
    if raw is None:
        return GateConfig()
    if not isinstance(raw, Mapping) or set(raw) - _TOP_KEYS:
        extra = sorted(set(raw) - _TOP_KEYS) if isinstance(raw, Mapping) else []
        raise GateConfigError(
            f"{path}: expected a mapping with 'tolerance' (and 'recovery_sources')"
            + (f" (unknown: {', '.join(map(str, extra))})" if extra else "")
        )
    sources = raw.get("recovery_sources", list(ERROR_SOURCES))
    if not isinstance(sources, list) or not sources or not all(s in ERROR_SOURCES for s in sources):
        raise GateConfigError(f"{path}: recovery_sources: a non-empty list among {', '.join(ERROR_SOURCES)}")
    given = raw.get("tolerance") or {}
    if not isinstance(given, Mapping):
        raise GateConfigError(f"{path}: tolerance: must map a family to its allowed drop")
    tolerance = dict(DEFAULT_TOLERANCE)
    deps = DEFAULT_DEPENDENCY_TOLERANCE
    usage: dict[str, float] = {}
    for key, value in given.items():
        if key in USAGE_TOLERATED:
            usage[str(key)] = _relative(value, f"{path}: tolerance.{key}")
        elif key in BLOCKING:
            raise GateConfigError(f"{path}: tolerance.{key}: a blocking family must be zero; it takes no tolerance")
        elif key == "dependency_violations":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1000:
                raise GateConfigError(
                    f"{path}: tolerance.{key}: an allowed increase in violations per checked "
                    "trajectory (a number >= 0, e.g. 0.05)"
                )
            deps = float(value)
        elif key in TOLERATED:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
                raise GateConfigError(f"{path}: tolerance.{key}: a drop in ratio points between 0 and 1")
            tolerance[str(key)] = float(value)
        else:
            raise GateConfigError(
                f"{path}: tolerance.{key}: unknown family (known: "
                f"{', '.join([*TOLERATED, 'dependency_violations', *USAGE_TOLERATED])})"
            )
    share = raw.get("simulator_share", DEFAULT_SIMULATOR_SHARE)
    if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 <= share <= 1:
        raise GateConfigError(
            f"{path}: simulator_share: the largest share (0 to 1) of the flipped cases' "
            "failures blamed on the simulated user before the gate gives no verdict"
        )
    return GateConfig(
        tolerance=tolerance,
        dependency_violations=deps,
        usage=usage,
        recovery_sources=tuple(s for s in ERROR_SOURCES if s in sources),
        simulator_share=float(share),
    )


_TOP_KEYS = frozenset({"tolerance", "recovery_sources", "simulator_share"})


def recovery_families(
    by_source: Mapping[str, Mapping[str, Mapping[str, int]]], sources: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Recovery and hallucination after error over the chosen error sources
    (``recovery_by_source`` of the figures)."""
    out: dict[str, tuple[int, int]] = {}
    for family in (f.key for f in FAMILIES if f.ratio and not f.per_call):  # F4: counted per faulted trajectory
        parts = [by_source.get(s, {}).get(family, {}) for s in sources]
        out[family] = (sum(p.get("num", 0) for p in parts), sum(p.get("den", 0) for p in parts))
    return out


def _relative(value: Any, where: str) -> float:
    """``+10%`` (or ``10%``, or the number 0.1) as 0.1."""
    number: Any = value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip().removesuffix("%").lstrip("+")) / 100
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 <= number <= 100:
        raise GateConfigError(f"{where}: an allowed relative increase such as +10% (or 0.1)")
    return float(number)


def load_gate_config(path: str | Path) -> GateConfig:
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GateConfigError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise GateConfigError(f"{p}: cannot read: {exc}") from None
    return parse_gate_config(raw, path=str(p))


@dataclass(frozen=True)
class RunFigures:
    """What the gate reads of a run: its family ratios and violation count."""

    ref: str
    name: str
    id: int
    toolset: str
    toolset_version: str
    toolset_label: str
    suite: str
    trajectories: int
    families: dict[str, tuple[int, int]]  # family -> (num, den)
    dependency_violations: int  # over ``trajectories`` checked trajectories
    dependency_checks: int | None = None  # the order pairs checked: F5's denominator as every page states it
    usage: dict[str, float | None] = field(default_factory=dict)  # USAGE_TOLERATED key -> value (None: no data)
    recovery_by_source: dict[str, tuple[int, int]] = field(default_factory=dict)  # ERROR_SOURCES -> (num, den)
    causes: list[tuple[int, str]] = field(default_factory=list)  # (failed trajectories, cause), largest first


@dataclass(frozen=True)
class CaseRef:
    case_id: str
    trial: int
    fault: str
    failures: tuple[str, ...]
    trajectory_id: int | None = None

    @property
    def families(self) -> list[str]:
        return sorted({family_of(f) for f in self.failures})


@dataclass(frozen=True)
class FamilyVerdict:
    family: str
    baseline: tuple[int, int] | int | float | None  # a float (or None) for cost and latency
    candidate: tuple[int, int] | int | float | None
    delta: float | None  # candidate - baseline (rate; violations per trajectory; relative for cost and latency)
    allowed: str
    status: str  # "pass" | "regressed" | "blocking" | "n/a"
    detail: str
    of_checks: bool = False  # F5: baseline and candidate are (violations, order checks), not per trajectory

    @property
    def title(self) -> str:
        return FAMILY_TITLES.get(self.family, self.family)


@dataclass(frozen=True)
class GateResult:
    baseline: RunFigures
    candidate: RunFigures
    families: list[FamilyVerdict]
    regressed_cases: list[CaseRef]  # passed in the baseline, fail in the candidate
    blocking_cases: list[CaseRef]  # candidate trajectories with a blocking failure
    regressed_count: int
    shared_cases: int
    notes: list[str]
    simulator_note: str | None = None  # too many flipped failures blamed on the simulated user: no verdict

    @property
    def passed(self) -> bool:
        return all(f.status in ("pass", "n/a") for f in self.families)

    @property
    def no_verdict(self) -> bool:
        """The simulated user explains too much of the difference, and nothing blocks: neither better nor worse."""
        return self.simulator_note is not None and not any(f.status == "blocking" for f in self.families)

    @property
    def failed_families(self) -> list[FamilyVerdict]:
        return [f for f in self.families if f.status in ("regressed", "blocking")]


def _rate(r: tuple[int, int]) -> float | None:
    return None if r[1] == 0 else r[0] / r[1]


def _pct(r: tuple[int, int]) -> str:
    rate = _rate(r)
    return f"{r[0]}/{r[1]} (n/a)" if rate is None else f"{r[0]}/{r[1]} ({100 * rate:.1f}%)"


def _usage_verdict(key: str, b: float | None, c: float | None, tol: float) -> FamilyVerdict:
    """A relative increase of cost or latency against its tolerance."""
    allowed = f"increase <= {100 * tol:g}%"
    if b is None:
        return FamilyVerdict(key, b, c, None, allowed, "n/a", "no data in the baseline")
    if c is None:
        return FamilyVerdict(key, b, c, None, allowed, "regressed", "not measured in candidate")
    delta = (c - b) / b if b else (0.0 if c == 0 else float("inf"))
    regressed = delta > tol + 1e-12
    return FamilyVerdict(
        key, b, c, delta, allowed, "regressed" if regressed else "pass", f"{b:g} -> {c:g}: {100 * delta:+.1f}%"
    )


def _recovery_by_source(
    baseline: RunFigures, candidate: RunFigures, config: GateConfig, tol: float, detail: str
) -> tuple[bool, str]:
    """Recovery is compared error source by error source (injected, tool,
    schema, unknown tool), over the sources both runs met: a candidate that
    meets fewer easy errors (a schema error it corrects) is not worse for it."""
    dropped = []
    for source in config.recovery_sources:
        b, c = baseline.recovery_by_source.get(source, (0, 0)), candidate.recovery_by_source.get(source, (0, 0))
        rb, rc = _rate(b), _rate(c)
        if rb is not None and rc is not None and rc - rb < -tol - 1e-12:
            dropped.append(f"{source} {_pct(b)} -> {_pct(c)}")
    if dropped:
        return True, f"{detail}; dropped: {', '.join(dropped)}"
    if "-" in detail.split(": ")[-1]:
        return False, f"{detail}; no error source dropped (the mix of errors changed)"
    return False, detail


def evaluate_gate(
    baseline: RunFigures,
    candidate: RunFigures,
    config: GateConfig,
    *,
    regressed_cases: Sequence[CaseRef] = (),
    blocking_cases: Sequence[CaseRef] = (),
    regressed_count: int | None = None,
    shared_cases: int = 0,
    simulator: tuple[int, int] = (0, 0),
) -> GateResult:
    """Decide family by family; the cases are reported, the families decide. ``simulator``: of the
    flipped cases' failing sides, (blamed on the simulated user, all): above the configured share,
    the regressions are no verdict and the result says so."""
    verdicts: list[FamilyVerdict] = []
    for fam in BLOCKING:
        b, c = baseline.families[fam], candidate.families[fam]
        rb, rc = _rate(b), _rate(c)
        verdicts.append(
            FamilyVerdict(
                fam,
                b,
                c,
                None if rb is None or rc is None else rc - rb,
                "must be 0",
                "blocking" if c[0] > 0 else "pass",
                f"{_pct(c)} in the candidate: must be zero" if c[0] else "zero",
            )
        )
    for fam in TOLERATED:
        b, c = baseline.families[fam], candidate.families[fam]
        rb, rc = _rate(b), _rate(c)
        tol = config.tolerance[fam]
        allowed = f"drop <= {100 * tol:.1f} pts"
        if rb is None:
            verdicts.append(FamilyVerdict(fam, b, c, None, allowed, "n/a", "no denominator in the baseline"))
            continue
        if rc is None:  # measured before, not now: the candidate cannot pass on what it did not exercise
            verdicts.append(
                FamilyVerdict(fam, b, c, None, allowed, "regressed", f"not measured in candidate (baseline {_pct(b)})")
            )
            continue
        delta = rc - rb
        regressed = delta < -tol - 1e-12
        detail = f"{_pct(b)} -> {_pct(c)}: {100 * delta:+.1f} pts"
        if fam == "recovery" and baseline.recovery_by_source and candidate.recovery_by_source:
            regressed, detail = _recovery_by_source(baseline, candidate, config, tol, detail)
        verdicts.append(FamilyVerdict(fam, b, c, delta, allowed, "regressed" if regressed else "pass", detail))
    bd = (baseline.dependency_violations, baseline.trajectories)
    cd = (candidate.dependency_violations, candidate.trajectories)
    rbd, rcd = _rate(bd) or 0.0, _rate(cd) or 0.0
    delta = rcd - rbd
    detail = f"{bd[0]}/{bd[1]} -> {cd[0]}/{cd[1]} violations per trajectory: {delta:+.3f}"
    b_checks, c_checks = baseline.dependency_checks, candidate.dependency_checks
    of_checks = b_checks is not None and c_checks is not None
    if b_checks is not None and c_checks is not None:
        # shown as everywhere else, violations of the order checks; gated per trajectory (docs/gate.md)
        bd, cd = (bd[0], b_checks), (cd[0], c_checks)
        detail = f"{fraction(*bd)} -> {fraction(*cd)} of the order checks; {detail}"
    verdicts.append(
        FamilyVerdict(
            "dependency_violations",
            bd,
            cd,
            delta,
            f"increase <= {config.dependency_violations:.3f} per trajectory",
            "regressed" if delta > config.dependency_violations + 1e-12 else "pass",
            detail,
            of_checks,
        )
    )
    verdicts.extend(
        _usage_verdict(key, baseline.usage.get(key), candidate.usage.get(key), tol) for key, tol in config.usage.items()
    )
    notes = []
    if baseline.suite != candidate.suite:
        notes.append(
            f"the runs used different suites ({baseline.suite} and {candidate.suite}); "
            f"{shared_cases} case trials in common"
        )
    if baseline.toolset_version != candidate.toolset_version:
        notes.append(
            f"toolset version changed: {baseline.toolset_label or baseline.toolset_version[:8]} -> "
            f"{candidate.toolset_label or candidate.toolset_version[:8]}"
        )
    note = simulator_note(simulator[0], simulator[1], config.simulator_share)
    if note is not None:  # a regression the simulator may explain is not called one
        verdicts = [
            replace(v, status="no verdict", detail=f"{v.detail}; no verdict: the simulated user")
            if v.status == "regressed"
            else v
            for v in verdicts
        ]
    return GateResult(
        baseline=baseline,
        candidate=candidate,
        families=verdicts,
        regressed_cases=list(regressed_cases),
        blocking_cases=list(blocking_cases),
        regressed_count=len(regressed_cases) if regressed_count is None else regressed_count,
        shared_cases=shared_cases,
        notes=notes,
        simulator_note=note,
    )
