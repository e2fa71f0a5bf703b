"""A readable terminal report of ``toollens score`` (rich tables).

Names and ids come from suites and traces: they are passed as plain Text, so
nothing in them is read as markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from app.commands.terminal_text import safe
from app.core.reports.wording import fault_text, fraction
from app.core.score.families import FAMILIES


def _t(value: object, style: str = "") -> Text:
    """Untrusted text for the terminal: no markup, and control characters
    (escape sequences included) shown as \\xNN instead of acted on."""
    return Text(safe(value), style=style)


def _ratio(num: int, den: int) -> str:
    return "n/a" if den == 0 else f"{num / den:.1%}"


def _ms(spread: dict[str, Any]) -> str:
    return f"p50 {spread['p50']:.0f} ms, p95 {spread['p95']:.0f} ms" if spread.get("p50") is not None else ""


def _usage(u: dict[str, Any] | None, n: int) -> str:
    """One line: tokens, cost and latency (docs/metrics.md), or "" when nothing was reported."""
    if not u:
        return ""
    parts = []
    if u["total_tokens"] is not None:
        parts.append(f"{u['total_tokens']:,} tokens ({u['trajectories_with_usage']} of {n} trajectories)")
    if u["cost_usd"] is not None:
        parts.append(f"${u['cost_usd']:.4f} ({u['trajectories_priced']} priced, prices of {u['prices_date']})")
    if _ms(u["model_latency_ms"]):
        parts.append("model " + _ms(u["model_latency_ms"]))
    if _ms(u["tool_latency_ms"]):
        parts.append("tools " + _ms(u["tool_latency_ms"]))
    return "usage: " + " · ".join(parts) if parts else ""


def report_console() -> Console:
    """Standard output for a report: the terminal's width, or, into a pipe or a file (which
    have none), wide enough that no table row wraps (``COLUMNS`` still wins)."""
    import os
    import sys

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(soft_wrap=True)
    return Console(width=PIPE_WIDTH, soft_wrap=True)


PIPE_WIDTH = 400


def render_report(
    console: Console,
    data: dict[str, Any],
    *,
    suite_name: str = "",
    toolset_version: str = "",
    top: int = 10,
    failing_total: int | None = None,
    passed: tuple[int, int] | None = None,
) -> None:
    """The report; ``failing_total``: how many cases failed when ``data["cases"]`` holds only
    some failing ones (a stored run's), else they are counted there; ``passed``: (passed, scored) when
    ``data["cases"]`` does not hold every trajectory (else counted there, the simulated user's left out)."""
    title = Text("ToolLens report")
    if suite_name:
        title.append_text(_t(f" · {suite_name}", style="bold"))
    if toolset_version:
        title.append(f" · toolset {toolset_version}", style="dim")
    console.print(title)
    console.print(Text(f"{data['trajectories']} trajectories", style="dim"))
    every = data.get("all_profiles")  # a run with simulated-user profiles: the headline is the cooperative user's
    if passed is None:
        scored = [c for c in data["cases"] if not c.get("user_error")]
        if every is not None:  # as Report.headline_trials counts them
            scored = [c for c in scored if c.get("user_profile") in (None, "cooperative")] or scored
        passed = (sum(1 for c in scored if c["passed"]), len(scored))
    console.print(Text(f"passed {fraction(*passed)}", style="bold"))
    if every is not None:
        console.print(
            Text(
                "the cooperative user's conversations (pass rate and pass^k); under every profile: passed "
                f"{fraction(every['passed'], every['scored'])}, the others in the cooperation gap below",
                style="dim",
            )
        )
    usage = _usage(data.get("usage"), data["trajectories"])
    if usage:
        console.print(Text(usage, style="dim"))

    fam = Table(title="The five failures (numerator / denominator)", title_justify="left")
    for col in ("family", "metric", "num / den", "ratio", "threshold"):
        fam.add_column(col, justify="right" if col in ("num / den", "ratio") else "left")
    for f in FAMILIES:
        if f.ratio:
            r = data[f.key]
            fam.add_row(
                f.terminal_heading,
                f.label,
                f"{r['num']} / {r['den']}",
                Text("no reference", style="dim") if r.get("no_reference") else _ratio(r["num"], r["den"]),
                Text("BLOCKING: must be 0", style="bold red")
                if f.blocking and r["num"] > 0
                else ("0" if f.blocking else ""),
            )
        elif f.code:  # F5: the violations of every pair, over the order checks made (as the pages read it)
            n, checks = sum(v["count"] for v in data[f.key]), data.get("dependency_checks")
            fam.add_row(
                f.terminal_heading,
                f"{f.label} of the order checks",
                str(n) if checks is None else f"{n} / {checks}",
                "" if checks is None else _ratio(n, checks),
                "",
            )
    console.print(fam)

    causes = data.get("causes") or []
    if causes:
        t = Table(title="What went wrong (failed trajectories by first divergence)", title_justify="left")
        t.add_column("failed", justify="right")
        t.add_column("cause")
        for c in causes[:top]:
            t.add_row(str(c["count"]), _t(c["text"]))
        if len(causes) > top:
            t.caption = f"… and {len(causes) - top} more causes (--top N or --json)"
        console.print(t)
    if data.get("causes_missing"):  # a run stored before causes were kept: reads never count them
        console.print(
            Text(
                f"{data['causes_missing']} failed trajectories have no cause: the run was stored before "
                "ToolLens kept causes; `toollens db backfill` counts them",
                style="yellow",
            )
        )

    if data.get("turns"):
        _turns_table(console, data["turns"])
    if data.get("agent_errors"):
        n = sum(data["agent_errors"].values())
        console.print(
            Text(
                f"{n} {'trajectory' if n == 1 else 'trajectories'} ended with the agent raising: "
                + ", ".join(f"{k} {v}" for k, v in data["agent_errors"].items())
                + " (each one's exception and traceback: its page, or `toollens export`)",
                style="bold red",
            )
        )
    if data.get("user_errors"):
        console.print(
            Text(
                f"{data['user_errors']} conversations broken by the simulated user (user_error): "
                "left out of every figure",
                style="yellow",
            )
        )

    off = [c for c in data["confusion"] if c["expected"] != c["called"]][:top]
    if off:
        t = Table(title="Top confusions (expected -> called)", title_justify="left")
        t.add_column("expected")
        t.add_column("called")
        t.add_column("count", justify="right")
        for c in off:
            called = _t(c["called"])
            if c.get("hallucinated"):
                called.append(" (hallucinated)", style="red")
            t.add_row(_t(c["expected"]), called, str(c["count"]))
        console.print(t)

    o = data["outcomes"]
    if any(o.values()):
        t = Table(title="Recovery outcomes (faulted trajectories)", title_justify="left")
        for k in o:
            t.add_column(k, justify="right")
        t.add_row(*(Text(str(v), style="bold red" if k == "hallucinated" and v else "") for k, v in o.items()))
        console.print(t)

    if data["dependency_violations"]:
        t = Table(title="Dependency violations by pair", title_justify="left")
        t.add_column("before")
        t.add_column("after")
        t.add_column("violations / checked", justify="right")
        for v in data["dependency_violations"]:
            t.add_row(_t(v["before"]), _t(v["after"]), f"{v['count']} / {v.get('checked', v['count'])}")
        console.print(t)

    failing = [c for c in data["cases"] if not c["passed"]]
    n_failing = len(failing) if failing_total is None else failing_total
    if failing:
        t = Table(
            title=f"Failing cases ({n_failing} of {data.get('cases_total', len(data['cases']))})", title_justify="left"
        )
        t.add_column("case")
        t.add_column("trial", justify="right")
        t.add_column("fault")
        t.add_column("failures")
        for c in failing[:top]:
            fault = c.get("fault")
            t.add_row(
                _t(c["case_id"]),
                str(c["trial"]),
                _t("" if not fault else fault_text(fault.get("kind"), fault.get("step"))),
                _t((", ".join(c["failures"]) + _raised(c.get("agent_error"))).lstrip("; ") or "(reward < 1)"),
            )
        if n_failing > top:
            t.caption = f"… and {n_failing - top} more (--top N or --json)"
        console.print(t)
    if data["pass_hat_k"]:
        console.print(Text("pass^k: " + "  ".join(f"k={k}: {v:.4f}" for k, v in data["pass_hat_k"].items())))
    if every is not None and every["pass_hat_k"]:
        console.print(
            Text(
                "pass^k under every profile: " + "  ".join(f"k={k}: {v:.4f}" for k, v in every["pass_hat_k"].items()),
                style="dim",
            )
        )
    if len(data.get("profiles") or {}) > 1:
        _gap_table(console, data["profiles"])


def _gap_table(console: Console, profiles: dict[str, Any]) -> None:
    """The cooperation gap: pass^k under each simulated-user profile against the cooperative one."""
    from app.core.reports.cooperation import gap_view
    from app.core.reports.profiles import cooperation_gap

    view = gap_view(cooperation_gap(profiles))
    if view is None:
        return
    t = Table(
        title=f"Cooperation gap (conversations with a simulated user, by its profile; pass^{view.k})",
        title_justify="left",
        caption=view.sentence,
    )
    for col in (
        "profile",
        "rate",
        "conv.",
        "pass^1",
        f"pass^{view.k}",
        "gap pass^1",
        "95% CI",
        f"gap pass^{view.k}",
        "act fired",
        "failed (user)",
        "broken",
    ):
        t.add_column(col, justify="left" if col == "profile" else "right")
    for r in view.rows:
        coop = r.profile == "cooperative"
        t.add_row(
            _t(r.profile),
            r.rate,
            str(r.conversations),
            r.pass_1,
            r.pass_k,
            "reference" if coop else r.gap_1,
            r.gap_1_ci,
            "" if coop else r.gap_k,
            str(r.acted),
            f"{r.failed} ({r.blamed_on_user})",
            str(r.user_errors),
        )
    console.print(t)


def _raised(error: Any) -> str:
    """A failing case's agent error after its failures: "; raised KeyError: 'saldo'" (the message cut at 80)."""
    if not isinstance(error, dict) or not error.get("type"):
        return ""
    message = str(error.get("message") or "")
    shown = f"{message[:79]}…" if len(message) > 80 else message
    return f"; raised {error['type']}" + (f": {shown}" if shown else "")


def _turns_table(console: Console, turns: dict[str, Any]) -> None:
    """The families within each user turn of the conversations."""
    t = Table(
        title="By user turn (conversations; F1 precision and recall, F2 accuracy, F3, F4 recovery)",
        title_justify="left",
    )
    shown = [f for f in FAMILIES if f.report_turn]
    for col in ("turn", "conv.", "failed", *(f.report_turn for f in shown), "failures"):
        t.add_column(col, justify="left" if col == "failures" else "right")
    for turn, x in turns.items():
        t.add_row(
            turn,
            str(x["trajectories"]),
            str(x["failed"]),
            *(f"{x[f.key]['num']}/{x[f.key]['den']}" for f in shown),
            _t(", ".join(f"{name} {n}" for name, n in x["failures"].items())),
        )
    console.print(t)
