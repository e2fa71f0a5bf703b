"""``toollens gate``: fail CI when a candidate run regresses against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, store_session


def gate(
    baseline: Annotated[str, typer.Option("--baseline", help="Baseline run (id or name).")],
    candidate: Annotated[str, typer.Option("--candidate", help="Candidate run (id or name).")],
    config: Annotated[Path | None, typer.Option("--config", help="gate.yaml with per-family tolerances.")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary (PR comment).")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML (CI test report).")] = None,
    db: DbOption = None,
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices", help="A price file over the bundled prices, for a cost tolerance (default: TOOLLENS_PRICES)."
        ),
    ] = None,
) -> None:
    """Gate a candidate run against a baseline run (CI).

    Hallucinated tools and hallucination after error must be zero in the candidate; every other family may not
    drop by more than its tolerance. Exit 0: passed; 1: regressed; 2: bad input; 3: no verdict (more than
    simulator_share of the flipped cases' failures are blamed on the simulated user)."""
    from app.core.prices import load_prices
    from app.core.reports.gate import GateConfig, load_gate_config
    from app.core.reports.gate_report import junit as render_junit
    from app.core.reports.gate_report import markdown as render_markdown
    from app.core.reports.wording import trajectories
    from app.store.gate import run_gate

    cfg = load_gate_config(config) if config is not None else GateConfig()
    table = load_prices(prices) if cfg.usage else None
    with store_session(db) as session:
        result = run_gate(session, baseline, candidate, cfg, prices=table)
    summary = render_markdown(result)
    if markdown is not None:
        markdown.write_text(summary, encoding="utf-8")
    if junit is not None:
        junit.write_text(render_junit(result), encoding="utf-8")
    console = Console(soft_wrap=True)
    verdict = "NO VERDICT" if result.no_verdict else "passed" if result.passed else "FAILED"
    console.print(
        Text(
            f"gate {verdict}: {result.baseline.name} -> {result.candidate.name}",
            style="bold yellow" if result.no_verdict else "bold green" if result.passed else "bold red",
        )
    )
    if result.simulator_note:
        console.print(Text(f"  simulator: {result.simulator_note}", style="yellow"))
    for note in result.notes:
        if note.startswith(("cooperation gap", "simulated-user profiles")):  # the others: the Markdown summary's
            console.print(Text(f"  {note}"))
        elif "toollens db backfill" in note:
            console.print(Text(f"  {note}", style="yellow"))
    for v in result.families:
        style = {"regressed": "red", "blocking": "bold red", "n/a": "dim"}.get(v.status, "")
        console.print(Text(f"  {v.status:9} {v.title}: {v.detail} (allowed: {v.allowed})", style=style))
    if result.regressed_count:
        console.print(
            Text(
                f"  {result.regressed_count} case trials passed in the baseline and fail in the candidate: "
                + ", ".join(f"{c.case_id}#{c.trial}" for c in result.regressed_cases[:10])
                + (" …" if result.regressed_count > 10 else "")
            )
        )
    if result.blocking_cases:
        console.print(
            Text(
                f"  {len(result.blocking_cases)} blocking case trials: "
                + ", ".join(f"{c.case_id}#{c.trial}" for c in result.blocking_cases[:10])
            )
        )
    for n, text in result.candidate.causes[:3]:
        console.print(Text(f"  {trajectories(n)} of the candidate: {text}", style="dim"))
    if result.no_verdict:
        raise typer.Exit(code=3)
    if not result.passed:
        raise typer.Exit(code=1)


def register(cli: typer.Typer) -> None:
    cli.command("gate")(gate)
