"""``toollens lint``: the description linter (see ``app.core.advise.lint``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, store_session, suite_mistakes

if TYPE_CHECKING:
    from app.core.advise.lint import Finding
    from app.core.language import Language

# app.core.advise.lint's SIMILAR_THRESHOLD and LOOKALIKE_THRESHOLD (tests/cli/test_cli_startup.py checks they agree),
# written out so that `toollens --help` does not import the core.
SIMILAR_THRESHOLD = 0.5
LOOKALIKE_THRESHOLD = 0.3


def lint(
    toolset: Annotated[Path, typer.Argument(help="A toolset file, or a suite file (with its pairs).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as one JSON object.")] = False,
    similar: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Similarity at which a pair reads alike.")
    ] = SIMILAR_THRESHOLD,
    lookalike: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Similarity at which a pair needs a negative delimitation.")
    ] = LOOKALIKE_THRESHOLD,
    run: Annotated[
        str | None,
        typer.Option("--run", help="A stored run (id or name): the pairs it confused come first, each reported."),
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
    """Lint tool descriptions: look-alike pairs, negative delimitation, argument formats, preconditions.

    A suite is checked first: every mistake in it (unknown keys, calls to tools the toolset lacks, arguments
    its schema rejects) is listed. Exit 0: no finding; 1: findings; 2: bad input or a mistake in the suite."""
    from app.commands.terminal_text import print_warnings
    from app.core.advise.lint import lint_json, lint_toolset, load_lint_target, toolset_language
    from app.core.suites.suite_check import validate_lint_target

    with suite_mistakes("nothing was linted"):
        print_warnings(validate_lint_target(toolset, lenient=lenient))
    target, pairs = load_lint_target(toolset)
    observed: dict[str, Any] | None = None
    cells: dict[tuple[str, str], int] = {}
    if run is not None:
        from app.store.lint import run_confusions

        with store_session(db) as session:
            observed, cells = run_confusions(session, run)
        names = {t.name for t in target}
        observed["confusions"] = [c for c in observed["confusions"] if c["expected"] in names and c["called"] in names]
    lang = toolset_language(target)
    findings = lint_toolset(target, pairs, similar=similar, lookalike=lookalike, confusions=cells, language=lang)
    if as_json:
        sys.stdout.write(
            json.dumps(lint_json(target, findings, language=lang, run=observed), ensure_ascii=False) + "\n"
        )
    else:
        head = (
            f"{target.name or toolset.name} {target.label} {target.version}: {len(target)} tools, "
            f"{len(findings)} findings"
        )
        if observed is not None:
            confused = sum(c["count"] for c in observed["confusions"])
            head += f"; run {observed['name']}: {confused} confusions"
        _print(Console(soft_wrap=True), head, findings, cells, lang)
    if findings:
        raise typer.Exit(code=1)


def _print(
    console: Console, head: str, findings: list[Finding], cells: dict[tuple[str, str], int], lang: Language
) -> None:
    """Findings about a pair of tools grouped under the pair (the run's most
    confused first, then highest score), then the findings about one tool."""
    from app.core.advise.lint import lint_pairs

    console.print(Text(head, style="bold"))
    for pair in lint_pairs(findings, cells, {t for f in findings for t in f.tools}):
        score = f"  (similarity {pair.score:.2f})" if pair.score else ""
        seen = pair.a_called_as_b + pair.b_called_as_a
        confused = f"  confused {seen}× in the run" if seen else ""
        console.print(Text(f"{pair.a} ~ {pair.b}{score}{confused}", style="bold"))
        for f in pair.findings:
            other = pair.b if f.tool == pair.a else pair.a
            console.print(Text.assemble("  ", (f"{f.rule}  ", "yellow"), _about(f, other, lang)))
    for f in findings:
        if not f.related:
            console.print(Text.assemble((f"{f.rule}  ", "yellow"), f.message))


def _about(f: Finding, other: str, lang: Language) -> str:
    """A finding's message as it concerns one pair (a tool with several
    look-alikes is named under each pair, with only that look-alike)."""
    from app.core.advise.lint import delimitation_hint

    if f.rule == "no_negative_delimitation":
        return delimitation_hint(f.tool, other, lang)
    return f.message


def register(cli: typer.Typer) -> None:
    cli.command("lint")(lint)
