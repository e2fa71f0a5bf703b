"""Importers: one module per source format, each a converter into the
formats (a suite document and a stream of trajectory records), so that
scoring, the store, the pages and the gate are shared by every source.

A converter is a module with ``NAME`` and ``convert(path, options) ->
Conversion``. ``FORMATS`` is the registry: one ``Format`` per source, naming
its module, the options it reads and what its records carry. Adding a format
is its module, one entry here and its section in docs/importers.md (a test
compares the two); ``convert``'s and ``import``'s help are built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # imported on first use (__getattr__): the CLI builds its help from FORMATS at start-up
    from app.importers.base import Conversion, Converted, Options, RecordSource, UnknownFormat

Option = Literal["tools", "domain", "group_by", "questions"]
"""An ``Options`` field, given on the command line as ``--tools``, ``--domain``, ``--group-by``, ``--questions``."""

TOOLSET: frozenset[Option] = frozenset({"tools", "domain"})


@dataclass(frozen=True)
class Format:
    """A source format: ``name`` is what ``--from`` / ``--format`` take, ``module``
    its converter in this package."""

    name: str
    module: str
    description: str
    options: frozenset[Option] = TOOLSET  # the Options fields its converter reads
    runs: bool = True  # records of runs; False: questions only (a suite), nothing to import
    reward: bool = False  # records can carry the source's own reward
    multi_turn: bool = False  # records can carry a conversation (``messages``), not only one question


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("toollens", "toollens", "ToolLens trajectory records, JSON Lines", reward=True, multi_turn=True),
        Format("openai-messages", "openai_messages", "chat-completions conversations", reward=True, multi_turn=True),
        Format("anthropic-messages", "anthropic_messages", "Messages API conversations", reward=True, multi_turn=True),
        Format("tau-bench", "tau_bench", "tau-bench historical trajectories", reward=True),
        Format(
            "otel",
            "otel",
            "an OTLP JSON file: one trace (or --group-by value) = one trajectory",
            options=TOOLSET | {"group_by"},
            reward=True,
        ),
        Format(
            "bfcl",
            "bfcl",
            "a BFCL question file (and its possible answers): suites; a BFCL result file with "
            "--questions: runs with BFCL's verdict",
            options=frozenset({"questions"}),
            runs=False,
            multi_turn=True,
        ),
        Format("toolbench", "toolbench", "ToolBench answer files", reward=True),
        Format("tau2", "tau2", "a tau2-bench results file", reward=True, multi_turn=True),
        Format("inspect", "inspect_log", "an Inspect AI log (.eval or .json)", reward=True, multi_turn=True),
    )
}


def __getattr__(name: str) -> Any:
    """``Options``, ``Conversion`` … from ``app.importers.base``, imported when first asked for."""
    if name in _FROM_BASE:
        return getattr(import_module(f"{__name__}.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_FROM_BASE = frozenset({"Conversion", "Converted", "Options", "RecordSource", "UnknownFormat"})


def taking(option: Option) -> list[str]:
    """The formats whose converter reads ``option``."""
    return [f.name for f in FORMATS.values() if option in f.options]


class Converter(Protocol):
    NAME: str

    def convert(self, path: Path, options: Options) -> Conversion: ...


def get_format(name: str) -> Format:
    found = FORMATS.get(name)
    if found is None:
        from app.importers.base import UnknownFormat

        raise UnknownFormat(f"unknown format {name!r} (known: {', '.join(FORMATS)})")
    return found


def get_converter(name: str) -> Converter:
    converter: Converter = import_module(f"{__name__}.{get_format(name).module}")
    return converter


def convert(name: str, path: Path, options: Options | None = None) -> Conversion:
    """Convert ``path`` from the format ``name``."""
    from app.importers.base import Options, distinct_trials

    conversion = get_converter(name).convert(path, options or Options())
    if name != "toollens":  # ToolLens's own records are taken as they are: a repeat there is a mistake to name
        conversion.records = distinct_trials(conversion.records, conversion.notes)
    return conversion


__all__ = [
    "FORMATS",
    "Conversion",
    "Converted",
    "Converter",
    "Format",
    "Option",
    "Options",
    "RecordSource",
    "UnknownFormat",
    "convert",
    "get_converter",
    "get_format",
    "taking",
]
