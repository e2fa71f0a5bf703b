"""``toollens toolset``: register toolset versions (from a file or a live MCP server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, fail, store_session

toolset_cli = typer.Typer(help="Toolset versions: descriptions as versioned code.", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", help="Toolset name (versions of one toolset share it).")]
Label = Annotated[str, typer.Option("--label", help="Version label, e.g. v2 or a git sha.")]


def _store(toolset: object, name: str, label: str, db: str | None) -> str:
    """Register the version; returns the label it is stored under (the first one given)."""
    from app.core.suites.tools import Toolset
    from app.store.toolsets import add_toolset_version

    assert isinstance(toolset, Toolset)
    if not name.strip() or len(name) > 200 or len(label) > 100:
        raise fail("--name must be 1-200 characters and --label at most 100")
    with store_session(db, write=True) as session:
        added = add_toolset_version(session, toolset, name=name, label=label)
    what = "added" if added.created else f"exists already (label {added.label!r})"
    Console(stderr=True, soft_wrap=True).print(
        Text(f"toolset {added.toolset} version {added.hash} ({len(toolset)} tools): {what}")
    )
    return added.label


@toolset_cli.command("add")
def add(
    file: Annotated[
        Path,
        typer.Argument(
            help="Toolset file (YAML or JSON: ToolLens, OpenAI or Anthropic tools), or a suite file (its toolset)."
        ),
    ],
    name: Name,
    label: Label = "",
    db: DbOption = None,
) -> None:
    """Register a toolset version by the content hash of its tools (name, description, schema)."""
    from app.core.advise.lint import load_lint_target

    toolset, _ = load_lint_target(file)
    _store(toolset, name, label, db)


@toolset_cli.command("import-mcp")
def import_mcp(
    name: Name,
    label: Label = "",
    command: Annotated[
        str | None, typer.Option("--command", help='Start the server over stdio, e.g. "python server.py".')
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp.")
    ] = None,
    timeout: Annotated[float, typer.Option(min=1.0, max=600.0, help="Seconds to wait for the server.")] = 30.0,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the snapshot as a toolset YAML file.")] = None,
    db: DbOption = None,
) -> None:
    """Snapshot a live MCP server's tools (tools/list) into a toolset version, word for word."""
    from app.core.errors import ToolLensError

    if (command is None) == (url is None):
        raise fail("give exactly one of --command or --url")
    from app.mcp.snapshot import snapshot_toolset

    try:
        toolset = snapshot_toolset(command=command, url=url, name=name, label=label, timeout=timeout)
    except ToolLensError as exc:
        raise fail(f"{command or url}: {exc}") from None
    stored_label = _store(toolset, name, label, db)
    if out is not None:  # only once registered: a failed import leaves no file behind
        import yaml

        doc = {"name": name, "label": stored_label, "tools": [t.document() for t in toolset]}
        out.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")


def register(cli: typer.Typer) -> None:
    cli.add_typer(toolset_cli, name="toolset")
