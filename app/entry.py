"""The ``toollens`` console script: ``score`` runs at once, every other command loads the typer app.

A CI job runs ``toollens score`` on every push. Importing ``app.cli`` (typer, rich, every command
group) and letting typer read the arguments (with pydantic) cost more than scoring a small file,
so the plain forms of ``score`` skip both (``app.commands.score``).
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["score"]:
        from app.commands.score import run_argv

        code = run_argv(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from app.cli import main as typer_main

    typer_main()


if __name__ == "__main__":
    main()
