"""What the CLI prints on standard error, and untrusted text made safe for the terminal: light
(rich is imported only to print), so every command and the fast ``score`` path can use it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.suites.suite_check import SuiteProblems

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(value: object) -> str:
    """Untrusted text for the terminal: control characters (escape sequences
    included) shown as \\xNN instead of acted on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", str(value))


def print_mistakes(exc: SuiteProblems, consequence: str) -> int:
    """Every mistake of a suite on its own line, then what did not happen; the exit status (2)."""
    for problem in exc.problems:
        print_error(str(problem))
    lenient = "" if all(p.fatal for p in exc.problems) else " (--lenient makes these warnings, for imported suites)"
    noun = "mistake" if len(exc.problems) == 1 else "mistakes"
    print_error(f"{len(exc.problems)} {noun} in the suite: {consequence}{lenient}")
    return 2


def print_warnings(warnings: Iterable[object]) -> None:
    for warning in warnings:
        print_error(str(warning), label="warning: ")


def print_error(message: str, *, label: str = "error: ") -> None:
    """One line on standard error, the label in bold red on a terminal: the CLI's errors."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True).print(Text.assemble((label, "bold red"), message), highlight=False, soft_wrap=True)
