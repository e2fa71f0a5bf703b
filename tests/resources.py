"""What the tests need beyond the repository (PostgreSQL, Chromium, the compiled
build, the shared sample data, packages), and the one rule for a missing one:
under ``CI`` it fails the run naming what is missing (a skip there would hide
a regression behind a green run); elsewhere the test skips and says how to get it."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The team's shared folder of public agent runs (tau-bench, BFCL, ToolBench) lives
# beside the checkout; TOOLLENS_TEST_DATA points elsewhere, relative to the repository.
DATA = (ROOT / os.environ.get("TOOLLENS_TEST_DATA", "../shared/data")).resolve()
DATA_HOW = (
    f"the public agent runs some tests read (tau-bench, BFCL, ToolBench, tau2, Inspect), looked for in {DATA}: "
    "`python scripts/fetch_test_data.py DIR` fetches them and TOOLLENS_TEST_DATA=DIR points the tests at "
    "them (the layout: docs/operations.md#test-data)"
)


def missing(what: str, how: str, *, module_level: bool = False) -> NoReturn:
    """Fail under ``CI`` naming ``what``; elsewhere skip saying ``how`` to get it."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must have {what}: {how}", pytrace=False)
    pytest.skip(f"{what} is missing: {how}", allow_module_level=module_level)


def require_data(*paths: Path) -> None:
    """The shared sample files a test reads (see ``DATA``)."""
    for path in paths:
        if not path.exists():
            missing(str(path), DATA_HOW)


def shared_data(*paths: Path) -> pytest.MarkDecorator:
    """Mark a test that reads these shared sample files (checked by ``conftest.py``)."""
    return pytest.mark.shared_data(*paths)


def require_module(name: str, how: str = "pip install -e '.[dev]'") -> ModuleType:
    """Import a package a test module needs (at module level)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"the Python package {name} ({exc})", how, module_level=True)


CHROMIUM = os.environ.get("TOOLLENS_CHROMIUM", "/usr/bin/chromium")  # Debian's: a browser download fails here
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_browser() -> ModuleType:
    """Playwright's sync API, once Chromium is known to be there (at module level)."""
    sync_api = require_module("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        missing(
            f"Chromium at {CHROMIUM}", "apt-get install chromium, or point TOOLLENS_CHROMIUM at one", module_level=True
        )
    return sync_api


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's ``Browser``), closed on the way out."""
    with require_browser().sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
