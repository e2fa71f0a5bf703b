"""Bounds on what an import builds, not only on the bytes it reads.

A small archive can name a big member, a member of a few bytes per value can
build hundreds of millions of Python objects, and a reference repeated many
times can expand one text into gigabytes. Each bound is read from the
environment when an import starts (``TOOLLENS_IMPORT_MAX_*``, app.settings)
and every refusal names the member or sample, the bound and its variable.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.errors import InvalidTrajectory
from app.importers.jsonstream import JSON_VALUES, json_values
from app.settings import load_settings

MEMBER_BYTES = "TOOLLENS_IMPORT_MAX_MEMBER_BYTES"
ATTACHMENT_CHARS = "TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS"
ATTACHMENT_CHARS_TOTAL = "TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS_TOTAL"


@dataclass(frozen=True)
class ImportBounds:
    member_bytes: int  # one archive member, or one sample of a .json log, in bytes
    json_values: int  # JSON values one member may build (its ``{``, ``[`` and ``,`` counted)
    attachment_chars: int  # characters that resolved references add to one trajectory
    attachment_chars_total: int  # the same, over a whole import


def import_bounds() -> ImportBounds:
    """The bounds of the environment (a bad value is a SettingsError naming its variable)."""
    s = load_settings()
    return ImportBounds(
        s.import_max_member_bytes,
        s.import_max_json_values,
        s.import_max_attachment_chars,
        s.import_max_attachment_chars_total,
    )


class ValueCount:
    """``json_values`` over a stream of chunks (a member as it is inflated):
    refuses as soon as the count passes the bound, before the rest is read."""

    def __init__(self, limit: int, where: str) -> None:
        self.limit, self.where, self.seen = limit, where, 0

    def __call__(self, chunk: bytes) -> None:
        self.seen += json_values(chunk, self.limit)
        if self.seen > self.limit:
            raise InvalidTrajectory(
                f"would build more than {self.limit} JSON values ({JSON_VALUES})", source=self.where
            )


class Overspent(Exception):
    """A sample whose references expand past a budget (the message names the bound)."""


class AttachmentBudget:
    """The characters ``attachment://`` references add when they are resolved:
    at most ``per_trajectory`` in one sample and ``total`` in the samples of
    one pass over a log that were converted (a refused sample costs nothing)."""

    def __init__(self, per_trajectory: int, total: int) -> None:
        self.per_trajectory, self.total = per_trajectory, total
        self.used_total = 0
        self.used = 0

    def start_sample(self) -> None:
        self.used = 0

    def end_sample(self) -> None:
        self.used_total += self.used
        self.used = 0

    def spend(self, chars: int, name: str) -> None:
        self.used += chars
        if self.used > self.per_trajectory:
            raise Overspent(
                f"attachment {name[:80]!r}: the sample's attachment references expand to more than "
                f"{self.per_trajectory} characters ({ATTACHMENT_CHARS}; each reference counts)"
            )
        if self.used_total + self.used > self.total:
            raise Overspent(
                f"attachment {name[:80]!r}: the log's attachment references expand to more than "
                f"{self.total} characters ({ATTACHMENT_CHARS_TOTAL}; each reference counts)"
            )
