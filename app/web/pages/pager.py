"""A list's pager, as the runs and run pages show it under their tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pager:
    """ "first–last of count", with the links to the pages before and after ("" when none)."""

    first: int
    last: int
    count: int
    previous: str
    next: str


def pager(count: int, limit: int, offset: int, url: Callable[[int], str]) -> Pager | None:
    """The pager of a list of ``count`` shown ``limit`` at a time from ``offset`` (None: one page holds it)."""
    if count <= limit:
        return None
    return Pager(
        first=offset + 1,
        last=min(offset + limit, count),
        count=count,
        previous=url(offset - limit) if offset > 0 else "",
        next=url(offset + limit) if offset + limit < count else "",
    )
