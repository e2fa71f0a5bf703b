"""``toollens fix``: the description edits a stored run calls for, a candidate
suite with them, and its A/B run against the original (``app.core.advise.fix``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, environment_error, fail, store_session
from app.commands.terminal_text import safe

if TYPE_CHECKING:
    from app.core.advise.fix import Proposal


def register(cli: typer.Typer) -> None:
    cli.command("fix")(fix)


def fix(
    run: Annotated[str, typer.Argument(help="The run, by name or id.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the proposals as one JSON object (docs/formats.md).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write a candidate suite (YAML or JSON by the "
            "extension) with only descriptions changed: the proposals that "
            "explain a failed trajectory (advice only when --only names it); "
            "an existing file only with --force.",
        ),
    ] = None,
    toolset_only: Annotated[
        bool, typer.Option("--toolset", help="With --out: write only the candidate toolset.")
    ] = False,
    only: Annotated[str | None, typer.Option("--only", help="Apply these proposals only, by number: 1,3.")] = None,
    pair: Annotated[
        list[str] | None,
        typer.Option(
            "--pair",
            help="Apply the description edits of this confused pair only: A,B (repeatable; with --only, both).",
        ),
    ] = None,
    top: Annotated[int, typer.Option(min=1, max=1000, help="How many proposals to print.")] = 20,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Rewrite the worst pairs' descriptions with this model "
            "(OpenAI-compatible); kept only when names and schemas are untouched "
            "and the partner is named.",
        ),
    ] = "",
    base_url: Annotated[str | None, typer.Option(help="The model's OpenAI-compatible base URL.")] = None,
    pairs: Annotated[int, typer.Option(min=1, max=20, help="With --model: how many worst pairs to rewrite.")] = 4,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Run the candidate with the run's agent settings, "
            "trials and seeds, store it, print the A/B and the gate's verdict "
            "(runs made by `toollens run`).",
        ),
    ] = False,
    verify_run: Annotated[
        str | None, typer.Option("--verify-run", help="Name of the candidate run (default: RUN-fix-N).")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="gate.yaml for the verdict.")] = None,
    force: Annotated[bool, typer.Option("--force", help="With --out: replace an existing file.")] = False,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a pull-request body: the diffs, the figures, the verdict.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Propose the description edits a run calls for, ranked by the failed trajectories each explains.

    Exit 0: proposals printed (or written); with --verify, as `gate`: 0 passed, 1 regressed; 2: bad input."""
    from app.core.advise import fix as core
    from app.core.suites.suitefile import render

    numbers = _numbers(only) if only is not None else None
    if out is not None:
        _check_target(out, "--out", force=force)
    if markdown is not None:
        _check_target(markdown, "--markdown", force=True)
    with store_session(db) as session:
        from app.store.fix import run_fix

        found = run_fix(session, run)
        run_name, config_used = found.run.name, dict(found.run.config or {})
    proposals = found.proposals
    if model:
        proposals = _rewrite(found, model=model, base_url=base_url, pairs=pairs)
    try:
        chosen = core.select(proposals, numbers if numbers is not None or not pair else [])
        if numbers is None and not pair:  # advice explains no failed trajectory: written only when asked by number
            chosen = [p for p in chosen if not p.advice]
    except ValueError as exc:
        raise fail(f"--only: {exc}") from None
    if pair:
        wanted = _pairs(pair)
        edits = core.for_pairs(proposals, wanted)
        missing = [f"{a},{b}" for a, b in wanted if not core.for_pairs(edits, [(a, b)])]
        if missing:
            raise fail(f"--pair {' '.join(missing)}: no description edit for that pair in run {run_name}")
        chosen += [p for p in edits if p not in chosen]
    console = Console(soft_wrap=True)
    if as_json:
        sys.stdout.write(
            json.dumps(fix_json(found.run.name, found.suite.toolset.name, found.failed, proposals), ensure_ascii=False)
            + "\n"
        )
    else:
        _print(console, run_name, found.failed, proposals[:top], len(proposals))
    if not (out or verify or markdown):
        return
    candidate = core.candidate_suite(found.document, chosen)
    diffs = description_diffs(found.document, candidate)
    err = Console(stderr=True, soft_wrap=True)
    if out is not None:
        write_file(out, render(out, None, candidate["toolset"] if toolset_only else candidate, []))
        err.print(
            Text(
                safe(
                    f"wrote {out}: {len(diffs)} descriptions changed by {sum(p.applies for p in chosen)} "
                    f"proposals; names, schemas, mocks and cases as in run {run_name} "
                    f"(label {candidate['toolset'].get('label')})"
                ),
                style="bold",
            )
        )
        for name, segments in diffs:
            err.print(Text.assemble((f"  {safe(name)}: ", "bold"), *_segments(segments)))
        skipped = [p for p in chosen if not p.applies]
        if skipped:
            err.print(
                Text(
                    "  not written (they live outside the suite): "
                    + ", ".join(f"#{p.number} {p.where.replace('_', ' ')}" for p in skipped)
                )
            )
    if not verify:
        if markdown is not None:
            write_file(markdown, pr_body(run_name, chosen, diffs, None).encode("utf-8"))
        return
    from app.commands.fix_verify import verify_candidate

    def write_pr(verdict: str) -> None:
        assert markdown is not None
        write_file(markdown, pr_body(run_name, chosen, diffs, verdict).encode("utf-8"))

    code = verify_candidate(
        db,
        run_name,
        config_used,
        candidate,
        chosen,
        name=verify_run,
        gate_config=config,
        write_pr=None if markdown is None else write_pr,
        console=console,
        candidate_file=out,
    )
    if code:
        raise typer.Exit(code=code)


def _numbers(only: str) -> list[int]:
    try:
        numbers = [int(x) for x in only.replace(" ", "").split(",") if x]
    except ValueError:
        raise fail(f"--only {only!r}: give proposal numbers, e.g. 1,3") from None
    if not numbers:
        raise fail("--only: give at least one proposal number")
    return numbers


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        a, sep, b = item.partition(",")
        if not sep or not a.strip() or not b.strip():
            raise fail(f"--pair {item!r}: give two tool names, e.g. buscar_pedido,buscar_producto")
        out.append((a.strip(), b.strip()))
    return out


def _check_target(path: Path, flag: str, *, force: bool) -> None:
    """Refuse, before any work, a file fix must not write: a symbolic link
    (never written through), a directory, an existing file without --force."""
    if path.is_symlink():
        raise fail(f"{flag} {path}: a symbolic link; fix never writes through one: give the file's own path")
    if path.is_dir():
        raise fail(f"{flag} {path}: a directory; give a file name")
    if path.exists() and not force:
        raise fail(
            f"{flag} {path}: the file exists; fix does not replace a suite silently: give a new name, or "
            "--force to replace it"
        )


def write_file(path: Path, data: bytes) -> None:
    """Write atomically (a temporary file beside it, then a rename), never
    through a symbolic link; a SIGTERM during the write removes the
    temporary file (a kill -9 cannot be caught, but the rename never leaves
    a half-written file)."""
    import signal
    import threading

    from app.core.suites.suitefile import replace_atomically

    if path.is_symlink():
        raise fail(f"{path}: a symbolic link; fix never writes through one: give the file's own path")

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        replace_atomically(path, data)
    except OSError as exc:
        raise environment_error(exc) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def fix_json(run: str, toolset: str, failed: int, proposals: list[Proposal]) -> dict[str, Any]:
    """The ``toollens fix --json`` object (docs/formats.md)."""
    return {
        "run": run,
        "toolset": toolset,
        "failed_trajectories": failed,
        "proposals": [p.to_dict() for p in proposals],
    }


def description_diffs(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Per changed description (``tool`` or ``tool.field``), its word diff as (op, text) segments."""
    from app.core.advise.fix import changed_descriptions
    from app.core.textdiff import word_diff

    return [
        (name, [(s.op, s.text) for s in word_diff(a, b)])
        for name, a, b in changed_descriptions(before.get("toolset"), after.get("toolset"))
    ]


def _segments(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Word-diff segments as plain text that reads without colour: [-removed-] {+added+}."""
    out = []
    for op, text in segments:
        text = safe(text)
        if op == "equal":
            out.append((text, ""))
        elif op == "delete":
            out.append((f"[-{text}-]", "red"))
        else:
            out.append((f"{{+{text}+}}", "green"))
    return out


def _print(console: Console, run: str, failed: int, proposals: list[Proposal], total: int) -> None:
    from app.core.reports.wording import count, trajectories

    console.print(
        Text(
            f"run {safe(run)}: {count(total, 'proposal')} from {trajectories(failed)}, ranked by the failed "
            "trajectories each explains",
            style="bold",
        )
    )
    if not proposals:
        console.print(Text("nothing to propose: no failed trajectory points at a description"))
    from app.core.textdiff import word_diff

    for i, p in enumerate(proposals):
        if p.advice and (i == 0 or not proposals[i - 1].advice):
            console.print(
                Text(
                    "advice: each explains no failed trajectory (those that show it sank on something "
                    "else first); not written by --out unless named with --only",
                    style="bold",
                )
            )
        cells = ", ".join(f"{e}→{c} ×{n}" for (e, c), n in sorted(p.addresses.cells.items()))
        console.print(
            Text.assemble(
                (f"#{p.number} ", "bold"),
                (f"{p.pattern.replace('_', ' ')}", "yellow"),
                f", {safe(_where(p))}",
                (f": explains {trajectories(p.explains)}" if not p.advice else ": advice")
                + (f" ({safe(cells)})" if cells else "")
                + ("" if p.applies else "  [not written by --out]")
                + ("" if p.source == "deterministic" else f"  [{p.source}]"),
            )
        )
        console.print(Text.assemble("   ", *_segments([(s.op, s.text) for s in word_diff(p.before, p.after)])))
        for line in p.evidence[:3]:
            console.print(Text(f"   · {safe(line)}", style="dim"))

    if total > len(proposals):
        left = total - len(proposals)
        console.print(
            Text(
                f"{left} more {'proposal' if left == 1 else 'proposals'}: --top {total} prints all "
                f"{total} (--json lists them too)",
                style="bold",
            )
        )


def _where(p: Proposal) -> str:
    """Where the edit lives, in words: "the description of buscar_pedido", "the system prompt"."""
    if p.where == "system_prompt":
        return "the system prompt"
    if p.where == "error_message":
        return f"the error message of {p.tool}"
    if p.where == "parameter_description":
        return f"the description of {p.tool}.{p.field}"
    return f"the description of {p.tool}" + (f" (argument {p.field})" if p.field else "")


def _md_segment(op: str, text: str) -> str:
    """One word-diff segment in Markdown, its text escaped, its spaces outside the markers."""
    from app.core.reports.gate_report import md

    if op == "equal" or not text.strip():
        return md(text, 10_000) if text.strip() else " " if text else ""
    lead, body, trail = text[: len(text) - len(text.lstrip())], text.strip(), text[len(text.rstrip()) :]
    mark = "~~" if op == "delete" else "**"
    return (" " if lead else "") + f"{mark}{md(body, 10_000)}{mark}" + (" " if trail else "")


def pr_body(
    run: str, chosen: list[Proposal], diffs: list[tuple[str, list[tuple[str, str]]]], verdict: str | None
) -> str:
    """The pull request's body: what changed and why, then the figures and the verdict."""
    from app.core.reports.gate_report import md
    from app.core.reports.wording import count, trajectories

    lines = [
        f"## Tool descriptions rewritten from run {md(run)}",
        "",
        f"{count(len(chosen), 'proposal')} of `toollens fix`, ranked by the failed trajectories each explains:",
        "",
    ]
    for p in chosen:
        lines.append(
            f"- #{p.number} **{p.pattern.replace('_', ' ')}**, {md(_where(p))}: "
            + (f"explains {trajectories(p.explains)}" if not p.advice else "advice (explains no failed trajectory)")
            + ("" if p.applies else f" (not in the suite: {md(p.after, 600)})")
        )
    lines += ["", "### Descriptions (~~removed~~, **added**)", ""]
    for name, segments in diffs:
        lines.append(f"- `{md(name, 200)}`: " + "".join(_md_segment(op, t) for op, t in segments))
    if verdict:
        lines += ["", verdict]
    return "\n".join(lines) + "\n"


def _rewrite(found: Any, *, model: str, base_url: str | None, pairs: int) -> list[Proposal]:
    from app.commands.fix_model import rewrite_pairs

    return rewrite_pairs(found, model=model, base_url=base_url, pairs=pairs)
