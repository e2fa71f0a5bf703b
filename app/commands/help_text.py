"""What ``toollens --help`` prints on a terminal of 80 columns or more (or into a pipe): typer's own
help, rendered in advance, so that printing it loads neither typer nor the command groups.

Generated: ``python -m app.commands.help_text`` writes it again from the typer app after a
command or its first help line changes (tests/cli/test_cli_startup.py says when).
"""

ROOT_HELP = """\
Usage: toollens [OPTIONS] COMMAND [ARGS]...

  Why does your agent fail at using tools? Five separate failures, measured
  against mocked tools.

Options:
  --help  Show this message and exit.

Commands:
  score      Score trajectories against a suite, without a database.
  import     Stream a trajectories file into the store, scoring it on the...
  export     Write a stored run back as ToolLens trajectory records...
  serve      Start the web app (uvicorn).
  convert    Convert a trace or benchmark file into DIR/suite.yaml and...
  lint       Lint tool descriptions: look-alike pairs, negative...
  run        Run an agent over a suite with mocked tools; every finished...
  show       Show a stored run: the five families, pass^k, what went...
  gate       Gate a candidate run against a baseline run (CI).
  demo       Record example runs of the SIMULATED agent into the database...
  mcp-serve  Serve a case's mocked tools as an MCP server that records...
  finish     Finish an open run for good: it takes no more trajectories...
  judge      Classify each faulted trajectory's outcome with an LLM...
  curate     Write a run's trajectories as suite cases that reproduce...
  fix        Propose the description edits a run calls for, ranked by the...
  db         The database: schema migrations.
  toolset    Toolset versions: descriptions as versioned code.
"""


def render() -> str:
    """``toollens --help`` as the typer app prints it on a terminal 80 columns wide."""
    import contextlib
    import io
    import os

    from app.cli import cli

    out, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli(["--help"], prog_name="toollens")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue()


if __name__ == "__main__":
    from pathlib import Path

    path = Path(__file__)
    text = path.read_text(encoding="utf-8")
    start = text.index('ROOT_HELP = """\\\n') + len('ROOT_HELP = """\\\n')
    path.write_text(text[:start] + render() + text[text.index('"""\n\n\ndef render'):], encoding="utf-8")
