"""``toollens convert``: a trace or benchmark file into a suite and trajectory
records (see app/importers)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.importers import FORMATS, taking

FORMAT_HELP = f"Source format: {', '.join(FORMATS)}."
TOOLS_HELP = 'Tool-schema file (list of tools, {"tools": [...]} or {domain: [...]}); else inferred from the calls.'
DOMAIN_HELP = "Which domain of a multi-domain tool-schema file (default: the one the traces call)."
QUESTIONS_HELP = (
    f"{', '.join(taking('questions'))}: with a result file (what a model answered), the folder of the "
    "category's question file, its possible answers and multi_turn_func_doc/ (or the question file)."
)
GROUP_BY_HELP = (
    f"{', '.join(taking('group_by'))}: one trajectory per value of this span or resource attribute "
    "(e.g. gen_ai.conversation.id, session.id), not one per trace."
)


def register(cli: typer.Typer) -> None:
    @cli.command()
    def convert(
        file: Annotated[Path, typer.Argument(help="The source file.")],
        from_: Annotated[str, typer.Option("--from", help=FORMAT_HELP)],
        out: Annotated[Path, typer.Option(help="Output folder: suite.yaml and trajectories.jsonl.")],
        tools: Annotated[Path | None, typer.Option(help=TOOLS_HELP)] = None,
        domain: Annotated[str | None, typer.Option(help=DOMAIN_HELP)] = None,
        group_by: Annotated[str | None, typer.Option("--group-by", help=GROUP_BY_HELP)] = None,
        questions: Annotated[Path | None, typer.Option(help=QUESTIONS_HELP)] = None,
        skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Write the good records, list the bad.")] = False,
    ) -> None:
        """Convert a trace or benchmark file into DIR/suite.yaml and DIR/trajectories.jsonl."""
        from app.importers import Options
        from app.importers import convert as run_conversion
        from app.importers.writer import write_conversion

        console = Console(stderr=True, soft_wrap=True)
        conversion = run_conversion(
            from_, file, Options(tools=tools, domain=domain, group_by=group_by, questions=questions)
        )
        written = write_conversion(conversion, out, skip_bad=skip_bad, source=str(file))
        for note in conversion.notes:
            console.print(Text(f"note: {note}", style="yellow"))
        for line, message in written.skipped[:50]:
            console.print(Text(f"skipped {file}:{line}: {message}", style="yellow"))
        cases = sum(len(s.get("cases") or []) for s in [conversion.suite, *conversion.extra_suites])
        suites = ", ".join(str(p) for p in written.suites)
        console.print(
            Text(
                f"wrote {suites} ({cases} cases) and {written.trajectories} ({written.records} "
                f"trajectories, {written.calls} calls); skipped {len(written.skipped)}"
            )
        )
