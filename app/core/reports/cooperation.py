"""The cooperation gap as people read it (the run and compare pages, ``show``):
pass^k under each simulated-user profile against the cooperative one, and the
band of the others, as text and positions (app/core/reports/profiles.py computes it;
app/store/profiles.py reads it from a run). Pure: no store, no web."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.reports.profiles import COOPERATIVE, CooperationGap, ProfileRow

WIDTH = 200  # the band's SVG width: pass^k 0..1 across it


def pts(v: float | None) -> str:
    """A difference of two rates in points: "+12.5 pts", "—" without one."""
    if v is None:
        return "—"
    return f"{'+' if v >= 0 else '−'}{abs(100 * v):.1f} pts"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


@dataclass(frozen=True)
class GapRow:
    profile: str
    summary: str
    rate: str
    conversations: int
    pass_1: str
    pass_k: str
    gap_1: str
    gap_1_ci: str
    gap_k: str
    acted: int
    user_errors: int
    failed: int
    blamed_on_user: int
    tone: str  # "bad": the profile costs more than noise at pass^1; "" otherwise
    x: float  # its pass^k on the band (0..WIDTH)
    paired: str = ""  # "3 / 0 (p 0.25)": passed only under the cooperative user / only under this one, McNemar


@dataclass(frozen=True)
class GapView:
    k: int
    rows: list[GapRow]
    band: tuple[float, float] | None  # the band's ends on the SVG (0..WIDTH)
    cooperative_x: float | None
    sentence: str

    @property
    def width(self) -> int:
        return WIDTH

    @property
    def profiled(self) -> bool:
        """Another profile than the cooperative one ran."""
        return len(self.rows) > 1


def costs(r: ProfileRow) -> bool:
    """The profile costs the agent more than noise: the pass^1 gap's interval lies below 0, or
    the paired conversations flip towards the cooperative user with exact McNemar p < 0.05."""
    ci = r.gap_1_ci
    if ci is not None and ci[1] < 0:
        return True
    return r.paired is not None and r.paired_p is not None and r.paired_p < 0.05 and r.paired[0] > r.paired[1]


def gap_view(gap: CooperationGap | None) -> GapView | None:
    """The table, the band and one sentence; None without cooperative conversations."""
    if gap is None:
        return None
    k = gap.k
    rows = []
    for r in gap.rows:
        ci = r.gap_1_ci
        rows.append(
            GapRow(
                r.profile,
                r.summary,
                "—" if r.profile == COOPERATIVE else f"{r.rate:g}",  # it has no act of its own
                r.conversations,
                pct(r.at(1)),
                pct(r.at(k)),
                pts(r.gap_1),
                "" if ci is None else f"{pts(ci[0])} to {pts(ci[1])}",
                pts(r.gap_k),
                r.acted,
                r.user_errors,
                r.failed,
                r.blamed_on_user,
                "bad" if costs(r) else "",
                WIDTH * (r.at(k) or 0.0),
                "" if r.paired is None else f"{r.paired[0]} / {r.paired[1]} (p {r.paired_p:.2g})",
            )
        )
    coop = gap.cooperative
    sentence = "only the cooperative user ran: `toollens run --user-profile all` measures the gap"
    if gap.band_k is not None and gap.band_gap is not None and coop is not None:
        worst = min(gap.others, key=lambda r: r.gap_k if r.gap_k is not None else 0.0)
        drop = f"; the largest drop: {worst.profile}" if worst.gap_k is not None and worst.gap_k < -1e-12 else ""
        sentence = (
            f"pass^{k} under the cooperative user {pct(coop.at(k))}; under the other "
            f"{len(gap.others)} profiles from {pct(gap.band_k[0])} to {pct(gap.band_k[1])} "
            f"(gap {pts(gap.band_gap[0])} to {pts(gap.band_gap[1])}){drop}"
        )
    band = None if gap.band_k is None else (WIDTH * gap.band_k[0], WIDTH * gap.band_k[1])
    cx = None if coop is None or coop.at(k) is None else WIDTH * (coop.at(k) or 0.0)
    return GapView(k, rows, band, cx, sentence)


@dataclass(frozen=True)
class CompareGapRow:
    profile: str
    a: str
    b: str
    delta: str
    a_gap: str
    b_gap: str
    tone: str
    x: float | None = None  # where B − A falls on the band's axis (−1 at 0, +1 at WIDTH)


@dataclass(frozen=True)
class CompareGap:
    k: int
    rows: list[CompareGapRow]
    sentence: str
    same_profiles: bool
    band: tuple[float, float] | None = None  # the other profiles' B − A, on the axis
    cooperative_x: float | None = None  # the cooperative user's B − A, on the axis


def _delta_x(delta: float | None) -> float | None:
    """A B − A in −1..1 placed on the compare band's axis (0 in the middle)."""
    return None if delta is None else WIDTH * (max(-1.0, min(1.0, delta)) + 1) / 2


def compare_gap(data: dict[str, Any] | None) -> CompareGap | None:
    """Compare's cooperation section from ``cooperation`` (app/store/profiles.compare_gaps)."""
    if not data or not data.get("profiles") or (len(data["profiles"]) < 2 and data.get("same_profiles")):
        return None
    k = int(data["k"])
    rows = [
        CompareGapRow(
            r["profile"],
            pct(r["a"]),
            pct(r["b"]),
            pts(r["delta"]),
            pts(r["a_gap"]),
            pts(r["b_gap"]),
            "" if r["delta"] is None or abs(r["delta"]) < 1e-12 else "ok" if r["delta"] > 0 else "bad",
            _delta_x(r["delta"]),
        )
        for r in data["profiles"]
    ]
    band = data.get("delta_band")
    coop = data.get("delta_cooperative")
    if band is None:
        sentence = "no profile but the cooperative one ran in both runs: run both with the same --user-profile"
    else:
        n, ahead, behind = data["compared"], data["b_ahead"], data["b_behind"]
        counts = {"ahead": ahead, "behind": behind, "level": n - ahead - behind}
        every = next((w for w, c in counts.items() if c == n), None)
        holds = (
            f"B {every}{' with A' if every == 'level' else ''} under every profile"
            if every is not None
            else f"B {', '.join(f'{w} under {c}' for w, c in counts.items() if c)} of {n} profiles: "
            "the change does not hold for every user"
        )
        sentence = (
            f"B − A at pass^{k}: {pts(coop)} under the cooperative user, {pts(band[0])} to {pts(band[1])} "
            f"under the others; {holds}"
        )
    if not data.get("same_profiles"):
        sentence += " · the runs ran different profiles: only the rows both hold compare"
    lo, hi = (None, None) if band is None else (_delta_x(band[0]), _delta_x(band[1]))
    band_x = None if lo is None or hi is None else (lo, hi)
    return CompareGap(k, rows, sentence, bool(data.get("same_profiles")), band_x, _delta_x(coop))


__all__ = ["COOPERATIVE", "CompareGap", "GapView", "compare_gap", "gap_view"]
