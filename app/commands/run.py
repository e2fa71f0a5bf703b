"""``toollens run``: an agent under test over a suite, stored as a run."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, settings_for, suite_mistakes
from app.runner.agents import agent_help

AGENT_HELP = agent_help()


def _check_suite(suite: Path, faults: str | None, lenient: bool) -> None:
    """Every mistake in the suite (and a fault rule naming a tool it lacks) before anything runs."""
    from app.commands.terminal_text import print_warnings
    from app.core.errors import ToolLensError
    from app.core.run.router import FaultPlan
    from app.core.suites.suite_check import validate_suite_file

    try:
        fault_tools = list(FaultPlan.parse(faults).by_tool) if faults else []
    except ToolLensError:
        fault_tools = []  # the run refuses the plan itself, naming the rule
    with suite_mistakes("nothing was run"):
        print_warnings(validate_suite_file(suite, lenient=lenient, fault_tools=fault_tools)[1])


def register(cli: typer.Typer) -> None:
    cli.command("run")(run)


def run(
    suite: Annotated[Path | None, typer.Argument(help="Suite file (YAML or JSON); not needed with --resume.")] = None,
    agent: Annotated[str, typer.Option(help=AGENT_HELP)] = "simulated",
    model: Annotated[str, typer.Option(help="Model name sent to the endpoint.")] = "",
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible or Anthropic base URL.")] = None,
    trials: Annotated[int, typer.Option(min=1, max=1000, help="Runs of each case (pass^k).")] = 1,
    sweep_errors: Annotated[bool, typer.Option("--sweep-errors", help="Also run the recovery sweep.")] = False,
    sweep_kind: Annotated[str, typer.Option(help="Fault kind the sweep injects.")] = "http_503",
    faults: Annotated[
        str | None,
        typer.Option(
            help="Fault plan, e.g. 'p:0.1,kinds:http_429|timeout,seed:7' ('delay:250': faults answer 250 ms late)."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=512, help="Case runs in flight.")] = 4,
    run_name: Annotated[str | None, typer.Option("--run", help="Run name (default: suite-model-time).")] = None,
    resume: Annotated[str | None, typer.Option(help="Continue run RUN (id or name): only what is missing.")] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="Run slice I/N of the cases (processes share one --run); default "
            "TOOLLENS_SHARD, or JOB_COMPLETION_INDEX with TOOLLENS_SHARDS."
        ),
    ] = None,
    max_steps: Annotated[int, typer.Option(min=1, max=200, help="Model turns before 'step_limit'.")] = 12,
    system: Annotated[str | None, typer.Option(help="System prompt for model agents.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    timeout: Annotated[float, typer.Option(min=0.01, help="Seconds per model request.")] = 60.0,
    attempts: Annotated[int, typer.Option(min=1, max=20, help="Tries per model request (429/5xx/timeouts).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the simulated agent.")] = 0,
    sim_rates: Annotated[
        str, typer.Option(help="Simulated agent's rates, e.g. 'confusion=0.5,schema_error=0.1'.")
    ] = "",
    user_model: Annotated[
        str,
        typer.Option(
            help="Model that plays the user of cases with a simulated user "
            "(OpenAI-compatible; default: the rule-based user)."
        ),
    ] = "",
    user_base_url: Annotated[str | None, typer.Option(help="The user model's endpoint (default: --base-url).")] = None,
    user_profile: Annotated[
        list[str] | None,
        typer.Option(
            "--user-profile",
            help="Also run the cases with a simulated user under this profile (repeatable, or "
            "a comma list; all): impatient, drip_feed, wrong_assumption, omits_detail, "
            "changes_mind; cooperative, the reference, always runs.",
        ),
    ] = None,
    db: DbOption = None,
    lenient: Annotated[
        bool,
        typer.Option(
            "--lenient",
            help="For imported suites: mistakes in the suite (unknown "
            "keys, tools, arguments) are warnings, not errors.",
        ),
    ] = False,
) -> None:
    """Run an agent over a suite with mocked tools; every finished case run is stored at once.

    Results go to the database (--db, else TOOLLENS_DATABASE_URL, else ./toollens.db): `toollens show RUN`
    prints a run's figures, `toollens serve` shows it on the dashboard, `toollens export RUN` writes its records.
    Exit 0: run; 2: bad input (a mistake in the suite, a bad option); 3: infrastructure errors."""
    from app.runner.progress import RunProgress
    from app.runner.session import RunRequest, run_agent
    from app.runner.work import shard_from_env
    from app.store.db import database_label

    shard = shard or shard_from_env(os.environ)
    if suite is not None and not resume:
        _check_suite(suite, faults, lenient)

    request = RunRequest(
        agent=agent,
        suite_path=suite,
        model=model,
        base_url=base_url,
        trials=trials,
        faults=faults,
        sweep=sweep_errors,
        sweep_kind=sweep_kind,
        concurrency=concurrency,
        run_name=run_name,
        resume=resume,
        shard=shard,
        max_steps=max_steps,
        system=system,
        temperature=temperature,
        timeout=timeout,
        attempts=attempts,
        seed=seed,
        sim_rates=sim_rates,
        user_model=user_model,
        user_base_url=user_base_url,
        user_profiles=_profiles(user_profile or []),
    )
    console = Console(stderr=True, soft_wrap=True)
    settings = settings_for(db)
    outcome = run_agent(settings, request, progress=RunProgress)
    s = outcome.summary
    state = "finished" if outcome.finished else "open (run again with --resume to complete it)"
    console.print(
        Text(
            f"run {outcome.run_id} ({outcome.run_name}): stored {s.stored} of {outcome.planned} case runs, "
            f"{s.failed} failed, {s.agent_errors} agent errors{_by_type(s.agent_error_types)}, "
            f"{s.infra_errors} infrastructure errors, "
            f"{s.duplicates} stored already; {outcome.retries} endpoint retries; {s.elapsed:.1f} s; run {state}"
        )
    )
    option = f" --db {shlex.quote(db)}" if db else ""
    if request.user_profiles:
        console.print(
            Text(
                f"simulated-user profiles: {', '.join(request.user_profiles)}; the cooperation gap is on "
                "the run page and in `toollens show`"
            )
        )
    console.print(
        Text(
            f"stored in {database_label(settings.database_url)}: "
            f"`toollens show {shlex.quote(outcome.run_name)}{option}` "
            f"prints its figures; `toollens serve{option}` shows it at /runs/{outcome.run_id}"
        )
    )
    if s.infra_errors:
        raise typer.Exit(code=3)


def _profiles(values: list[str]) -> list[str]:
    """``--user-profile`` values as the profiles to run (exit 2 on a name that is none)."""
    from app.commands.common import fail
    from app.core.reports.profiles import ProfileError, parse_profiles

    try:
        return parse_profiles(values)
    except ProfileError as exc:
        raise fail(str(exc)) from None


def _by_type(types: Mapping[str, int]) -> str:
    """The agent errors by type, most first: " (KeyError 3, ValueError 1)"; "" without any."""
    if not types:
        return ""
    return " (" + ", ".join(f"{k} {n}" for k, n in sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))) + ")"
