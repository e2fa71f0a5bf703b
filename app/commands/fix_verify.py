"""``toollens fix --verify``: the candidate suite run with the original run's
agent settings, trials and seeds, stored, and read against the original: the
A/B figures and the gate's verdict."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from app.commands.common import fail, settings_for, store_session
from app.commands.terminal_text import safe

if TYPE_CHECKING:
    from app.core.advise.fix import Proposal
    from app.core.reports.gate import GateResult
    from app.store.fix import FixAB, GroupFigures


def _candidate_name(session: Any, run: str) -> str:
    from sqlalchemy import select

    from app.store.models import Run

    taken = set(session.scalars(select(Run.name).where(Run.name.like(f"{run[:180]}-fix%"))))
    n = 1
    while f"{run[:180]}-fix-{n}" in taken:
        n += 1
    return f"{run[:180]}-fix-{n}"


def verify_candidate(
    db: str | None,
    run: str,
    config: dict[str, Any],
    candidate: dict[str, Any],
    chosen: list[Proposal],
    *,
    name: str | None,
    gate_config: Path | None,
    write_pr: Callable[[str], None] | None,
    console: Console,
    candidate_file: Path | None = None,
) -> int:
    """Run the candidate, print the A/B and the verdict; the exit code of ``toollens gate``.
    ``write_pr`` writes the pull request's body (``fix --markdown``) given the verdict's section."""
    from app.core.reports.gate import GateConfig, load_gate_config
    from app.core.reports.gate_report import markdown as gate_markdown
    from app.core.reports.gate_report import md
    from app.runner.progress import RunProgress
    from app.runner.session import AGENT_KEYS, RUNNER_MARK, RUNNER_VERSION, WORK_KEYS, RunRequest, run_agent
    from app.store.fix import fix_ab
    from app.store.gate import run_gate

    if config.get(RUNNER_MARK) != RUNNER_VERSION:
        raise fail(
            f"run {run!r} was not made by `toollens run`: --verify needs the agent settings it keeps "
            "(run the candidate with `toollens run` and compare with `toollens gate`)"
        )
    cfg = load_gate_config(gate_config) if gate_config is not None else GateConfig()
    with store_session(db) as session:
        if name:
            from sqlalchemy import select

            from app.store.models import Run

            if session.scalar(select(Run.id).where(Run.name == name)) is not None:
                raise fail(
                    f"--verify-run {name}: a run with that name exists already; give another name, or leave "
                    f"--verify-run out (the candidate is then named {run}-fix-N)"
                )
        name = name or _candidate_name(session, run)
    settings = [k for k in (*WORK_KEYS, *AGENT_KEYS) if k in config]
    request = RunRequest(**{k: config[k] for k in settings}, suite_document=candidate, run_name=name)
    outcome = run_agent(settings_for(db), request, progress=RunProgress)
    drove = {c for p in chosen for c in p.addresses.cases}
    tools = {str(t.get("name") or (t.get("function") or {}).get("name")) for t in candidate["toolset"]["tools"]}
    with store_session(db) as session:
        from app.store.ingest import find_run

        base_id = find_run(session, run).id
        ab = fix_ab(session, base_id, outcome.run_id, drove, tools)
        result = run_gate(session, str(base_id), str(outcome.run_id), cfg)
    judged, real = who_judged(config, run, outcome.run_name, candidate_file=candidate_file)
    console.print(
        Text(
            safe(
                f"candidate run {outcome.run_id} ({outcome.run_name}): {outcome.summary.stored} case "
                f"runs, same agent settings, trials and seeds as {run}"
            ),
            style="bold",
        )
    )
    console.print(Text(safe(judged), style="bold yellow" if real else "bold"))
    for line in real:
        console.print(Text(safe(f"  {line}")))
    for line in ab_lines(ab, result):
        console.print(Text(safe(line)))
    verdict = "passed" if result.passed else "FAILED"
    console.print(
        Text(
            safe(f"gate {verdict}: {run} -> {outcome.run_name} (each family's verdict above)"),
            style="bold green" if result.passed else "bold red",
        )
    )
    if write_pr is not None:
        who = [md(judged[0].upper() + judged[1:], 2000)] + (["", "```sh", *real, "```"] if real else [])
        write_pr(
            "\n".join(
                [
                    "### Who judged",
                    "",
                    *who,
                    "",
                    "### A/B",
                    "",
                    *ab_markdown(ab, result),
                    "",
                    gate_markdown(result, families=False),
                ]
            )
        )
    return 0 if result.passed else 1


def _pct(num: int, den: int) -> str:
    return f"{num}/{den}" + (f" ({100 * num / den:.1f}%)" if den else "")


def _cut(a: int, b: int) -> str:
    return f"{a} → {b}" + (f" ({100 * (b - a) / a:+.0f}%)" if a else "")


def _group_line(title: str, g: GroupFigures) -> str:
    return (
        f"{title} ({g.cases} cases): passed {_pct(g.a_passed, g.a_total)} → {_pct(g.b_passed, g.b_total)}; "
        f"confusion calls {_cut(g.a_confusions, g.b_confusions)}; McNemar on shared trajectories: "
        f"{g.only_a} passed only before, {g.only_b} only after, p = {g.p_value:.3g}"
    )


def _families(ab: FixAB, result: GateResult | None = None) -> list[tuple[str, str, str, str, str]]:
    """Each family with data in either run: name, before, after, delta with its
    95% interval, and ONE verdict: the gate's where it judges the family (its
    reason when it is not a pass), else how the interval reads."""
    from app.core.reports.gate_report import figure

    gate = {v.family: v for v in result.families if v.status != "n/a"} if result is not None else {}
    out = []
    for f in ab.comparison.families:
        if not f.a.den and not f.b.den:
            continue
        ci = "" if f.delta_ci is None else f" [95% {100 * f.delta_ci[0]:+.1f}, {100 * f.delta_ci[1]:+.1f}]"
        delta = "n/a" if f.delta is None else f"{100 * f.delta:+.1f} pts"
        out.append(
            (
                f.family,
                _pct(f.a.num, f.a.den),
                _pct(f.b.num, f.b.den),
                delta + ci,
                _verdict(gate.pop(f.family)) if f.family in gate else f.reads_as,
            )
        )
    for v in gate.values():  # what the gate judges and the A/B has no rate for (order, cost, latency)
        out.append((v.family, figure(v.baseline, v.family), figure(v.candidate, v.family), "", _verdict(v)))
    return out


def _verdict(v: Any) -> str:
    """The gate's verdict on a family, with what decided it when it did not pass."""
    if v.status == "pass":
        return "pass"
    why = v.detail.split("; ", 1)[1] if v.family == "recovery" and "; " in v.detail else v.detail
    return f"{v.status}: {why} (allowed: {v.allowed})"


def ab_lines(ab: FixAB, result: GateResult | None = None) -> list[str]:
    """The A/B as plain lines: confusions, families with 95% intervals, McNemar, cells, the two groups."""
    c = ab.comparison
    lines = [f"confusions (calls to another tool than the expected one): {_cut(*ab.confusions)}"]
    lines += [
        f"  {family}: {a} → {b}  {delta}  {reads}".replace("   ", " ")
        for family, a, b, delta, reads in _families(ab, result)
    ]
    if c.mcnemar is not None:
        lines.append(
            f"McNemar (exact) on {c.shared_cases} shared trajectories: {c.mcnemar.passed_only_a} passed "
            f"only before, {c.mcnemar.passed_only_b} only after, p = {c.mcnemar.p_value:.3g}"
        )
    moved = [d for d in c.confusion_diff if d.expected != d.called and d.delta]
    if moved:
        lines.append(
            "confusion cells, before → after: "
            + ", ".join(
                f"{d.expected}→{d.called} {d.a}→{d.b}" for d in sorted(moved, key=lambda d: (d.delta, d.expected))[:12]
            )
        )
    lines.append(_group_line("cases whose failures drove the proposals", ab.drove))
    lines.append(_group_line("the other cases", ab.rest))
    return lines


def ab_markdown(ab: FixAB, result: GateResult | None = None) -> list[str]:
    """The A/B as a Markdown table and lines (names come from the toolset: escaped)."""
    from app.core.reports.gate_report import md

    c = ab.comparison
    rows = [
        f"Confusions (calls to another tool than the expected one): **{_cut(*ab.confusions)}**",
        "",
        "| family | before | after | delta [95% interval] | verdict |",
        "|---|---|---|---|---|",
    ]
    rows += [
        f"| {family} | {a} | {b} | {delta} | {md(reads, 400)} |" for family, a, b, delta, reads in _families(ab, result)
    ]
    if c.mcnemar is not None:
        rows += [
            "",
            f"Exact McNemar on {c.shared_cases} shared trajectories: {c.mcnemar.passed_only_a} passed only "
            f"before, {c.mcnemar.passed_only_b} only after, p = {c.mcnemar.p_value:.3g}.",
        ]
    moved = [d for d in c.confusion_diff if d.expected != d.called and d.delta]
    if moved:
        rows += ["", "| expected | called | before | after |", "|---|---|---|---|"]
        rows += [
            f"| {md(d.expected)} | {md(d.called)} | {d.a} | {d.b} |"
            for d in sorted(moved, key=lambda d: (d.delta, d.expected))[:30]
        ]
    rows += [
        "",
        f"- {_group_line('Cases whose failures drove the proposals', ab.drove)}",
        f"- {_group_line('The other cases', ab.rest)}",
    ]
    return rows


def who_judged(
    config: dict[str, Any], run: str, candidate_run: str, *, candidate_file: Path | None
) -> tuple[str, list[str]]:
    """Who ran both sides, in one sentence; with the simulated agent, also the
    commands that verify the same candidate with a real model (an
    OpenAI-compatible endpoint, local or hosted)."""
    import shlex

    agent = str(config.get("agent") or "simulated")
    model = str(config.get("model") or "")
    if agent != "simulated":
        where = f" at {config['base_url']}" if config.get("base_url") else ""
        return (
            f"judged by: agent {agent}"
            + (f", model {model}" if model else "")
            + where
            + f", the same on both sides ({run} and {candidate_run})",
            [],
        )
    judged = (
        f"judged by: the simulated agent (seed {config.get('seed', 0)}"
        + (f", rates {config['sim_rates']}" if config.get("sim_rates") else "")
        + f") on both sides ({run} and "
        f"{candidate_run}): a model of a model, which reads descriptions by their words, not as an LLM does. "
        "Before you merge, verify with a real model:"
    )
    q = shlex.quote
    cand = str(candidate_file) if candidate_file is not None else "candidate.yaml"
    common = (
        f"--agent openai --model MODEL --base-url URL --trials {config.get('trials', 1)}"
        + (f" --faults {q(str(config['faults']))}" if config.get("faults") else "")
        + (" --sweep-errors" if config.get("sweep") else "")
    )
    real = [] if candidate_file is not None else [f"toollens fix {q(run)} --out {cand}  # the same --only/--pair"]
    real += [
        f"toollens run SUITE.yaml {common} --run {q(run + '-real')}  # SUITE.yaml: the suite {run} ran",
        f"toollens run {q(cand)} {common} --run {q(candidate_run + '-real')}",
        f"toollens gate --baseline {q(run + '-real')} --candidate {q(candidate_run + '-real')}",
    ]
    return judged, real
