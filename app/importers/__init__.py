"""Importers: one module per source format, each a converter into the
formats (a suite document and a stream of trajectory records), so that
scoring, the store, the pages and the gate are shared by every source.

A converter is a module with ``NAME`` and ``convert(path, options) ->
Conversion``; adding a format is adding a module and one line to ``FORMATS``.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Protocol

from app.importers.base import Conversion, Converted, Options, RecordSource, UnknownFormat

FORMATS: dict[str, str] = {
    "toollens": "toollens",
    "openai-messages": "openai_messages",
    "anthropic-messages": "anthropic_messages",
    "tau-bench": "tau_bench",
    "otel": "otel",
    "bfcl": "bfcl",
    "toolbench": "toolbench",
    "tau2": "tau2",
    "inspect": "inspect_log",
}


class Converter(Protocol):
    NAME: str

    def convert(self, path: Path, options: Options) -> Conversion: ...


def get_converter(name: str) -> Converter:
    module = FORMATS.get(name)
    if module is None:
        raise UnknownFormat(f"unknown format {name!r} (known: {', '.join(FORMATS)})")
    converter: Converter = import_module(f"{__name__}.{module}")
    return converter


def convert(name: str, path: Path, options: Options | None = None) -> Conversion:
    """Convert ``path`` from the format ``name``."""
    return get_converter(name).convert(path, options or Options())


__all__ = ["FORMATS", "Conversion", "Converted", "Converter", "Options", "RecordSource", "UnknownFormat",
           "convert", "get_converter"]
