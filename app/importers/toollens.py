"""``toollens``: trajectory records as JSON Lines (docs/formats.md), as they are. ``--tools``
gives the toolset; without it the toolset is inferred from the calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from app.core.errors import InvalidTrajectory
from app.core.records import parse_line
from app.importers.base import Conversion, Converted, Options
from app.importers.jsonstream import refuse_one_object
from app.importers.toolsets import resolve_toolset

NAME = "toollens"


def convert(path: Path, options: Options) -> Conversion:
    source = str(path)
    if not path.is_file():
        raise InvalidTrajectory("file not found", source=source)
    refuse_one_object(path)

    def records() -> Iterator[Converted]:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, parse_line(line, index=number, source=source)
                except InvalidTrajectory as exc:
                    yield number, exc

    def called() -> set[str]:
        return {c.name for _, t in records() if not isinstance(t, InvalidTrajectory) for c in t.calls}

    toolset, notes = resolve_toolset(options.tools, options.domain, called, name=path.stem)
    return Conversion(suite={"name": path.stem, "toolset": toolset, "cases": []}, records=records, notes=notes)
