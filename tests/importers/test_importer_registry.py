"""The importer registry (``app.importers.FORMATS``) is the one list of source formats: each entry's
module is a converter of that name, the CLI's help is built from it, and docs/importers.md has a
section and a table row for each of them, and for no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.commands.convert import FORMAT_HELP, GROUP_BY_HELP
from app.importers import FORMATS, UnknownFormat, get_converter, get_format, taking

DOCS = Path(__file__).resolve().parents[2] / "docs" / "importers.md"


def test_each_format_is_a_converter_of_that_name() -> None:
    for name in FORMATS:
        assert name == get_converter(name).NAME
    with pytest.raises(UnknownFormat, match="known: toollens, openai-messages"):
        get_format("csv")


def test_the_docs_have_a_section_and_a_table_row_for_each_format_and_no_other() -> None:
    text = DOCS.read_text(encoding="utf-8")
    sections = re.findall(r"^## `([^`]+)`$", text, flags=re.M)
    rows = re.findall(r"^\| `([^`]+)` \|", text, flags=re.M)
    assert sections == list(FORMATS)  # in the registry's order
    assert sorted(rows) == sorted(FORMATS)


def test_the_help_is_built_from_the_registry() -> None:
    assert f"Source format: {', '.join(FORMATS)}." == FORMAT_HELP
    assert GROUP_BY_HELP.startswith("otel: ") and taking("group_by") == ["otel"]
    assert taking("tools") == [name for name in FORMATS if name != "bfcl"]  # bfcl files carry their own tools


def test_a_format_without_runs_is_refused_by_import(tmp_path: Path) -> None:
    from app.core.errors import SuiteError
    from app.importers import Options
    from app.importers.store import import_converted
    from app.settings import Settings

    questions = tmp_path / "q.json"
    questions.write_text("{}\n", encoding="utf-8")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    for name in (f.name for f in FORMATS.values() if not f.runs):
        with pytest.raises(SuiteError, match=f"a {name} file holds questions, no runs"):
            import_converted(settings, questions, name, Options(), run_name="r")
