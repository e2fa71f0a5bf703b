"""Suite versions as deduplicated parts, numbered per name under a unique
constraint.

A suite document is stored as its head (everything but the cases) and its
cases, each a ``suite_parts`` row by content hash: a version that adds one
case to a 20 MB suite stores that case and a list of hashes, not another
20 MB. A new version takes the next number of its name; when another writer
took that number first (the unique index on (name, version) refuses the
row), the version is built again on the newest one and stored under the
next number, so concurrent adds chain instead of forking.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from app.store.errors import Conflict
from app.store.models import SuitePart, SuiteRow

# Tries to store a version under the next number before giving up (409): every
# failed try means another writer stored a version meanwhile, so 20 writers at
# once need at most 20.
MAX_TRIES = 200
_CHUNK = 500  # hashes per IN (...) when reading parts

# what to store given the newest version of the name (None: the first): the
# document, its content digest (the row's ``hash``) and the parent id
Build = Callable[[SuiteRow | None], tuple[dict[str, Any], str, int | None]]


def part_hash(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def split(document: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The head (``cases`` kept in its place, as null) and the cases."""
    cases = document.get("cases")
    return {**document, "cases": None}, list(cases) if isinstance(cases, list) else []


def store_parts(session: Session, parts: list[Any]) -> list[str]:
    """Store each part not stored yet; their hashes, in order."""
    hashes = [part_hash(p) for p in parts]
    by_hash = dict(zip(hashes, parts, strict=True))
    unique = list(by_hash)
    have: set[str] = set()
    for i in range(0, len(unique), _CHUNK):
        have.update(session.scalars(select(SuitePart.hash).where(SuitePart.hash.in_(unique[i : i + _CHUNK]))))
    missing = sorted(h for h in by_hash if h not in have)  # one order for every writer: no deadlock
    if missing:
        dialect = session.get_bind().dialect.name
        ins = postgresql.insert(SuitePart) if dialect == "postgresql" else sqlite.insert(SuitePart)
        session.execute(
            ins.on_conflict_do_nothing(index_elements=["hash"]), [{"hash": h, "document": by_hash[h]} for h in missing]
        )
    return hashes


def document_parts(session: Session, document: dict[str, Any]) -> dict[str, Any]:
    head, cases = split(document)
    [head_hash] = store_parts(session, [head])
    return {"head": head_hash, "cases": store_parts(session, cases)}


def _read(session: Session, hashes: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    unique = list(dict.fromkeys(hashes))
    for i in range(0, len(unique), _CHUNK):
        found.update(
            session.execute(
                select(SuitePart.hash, SuitePart.document).where(SuitePart.hash.in_(unique[i : i + _CHUNK]))
            ).all()
        )
    return found


def suite_document(session: Session, row: SuiteRow) -> dict[str, Any]:
    """A suite version's whole self-contained document."""
    if row.parts is None:
        return row.legacy_document
    found = _read(session, [row.parts["head"], *row.parts["cases"]])
    head = found[row.parts["head"]]
    return {**head, "cases": [found[h] for h in row.parts["cases"]]}


def distinct_parts(session: Session, rows: list[SuiteRow]) -> list[tuple[dict[str, Any], list[Any]]]:
    """Per row, its head and the cases no earlier row had: each stored part read once."""
    seen: set[str] = set()
    out: list[tuple[dict[str, Any], list[Any]]] = []
    for row in rows:
        if row.parts is None:
            head, cases = split(row.legacy_document)
            out.append((head, cases))
            continue
        new = [h for h in dict.fromkeys([row.parts["head"], *row.parts["cases"]]) if h not in seen]
        seen.update(new)
        found = _read(session, new)
        out.append((found.get(row.parts["head"], {}), [found[h] for h in new if h != row.parts["head"]]))
    return out


def case_count(row: SuiteRow) -> int:
    if row.case_count is not None:
        return row.case_count
    if row.parts is not None:
        return len(row.parts["cases"])
    cases = row.legacy_document.get("cases") if isinstance(row.legacy_document, dict) else None
    return len(cases) if isinstance(cases, list) else 0


def newest(session: Session, name: str) -> SuiteRow | None:
    row: SuiteRow | None = session.scalar(
        select(SuiteRow).where(SuiteRow.name == name).order_by(SuiteRow.version.desc()).limit(1)
    )
    return row


def store_version(session: Session, name: str, build: Build, *, toolset_version_id: Callable[[], int]) -> SuiteRow:
    """Store the next version of ``name`` as ``build`` makes it from the newest
    one, again on the newest one each time another writer took the number."""
    for _ in range(MAX_TRIES):
        last = newest(session, name)
        document, digest, parent_id = build(last)
        same: SuiteRow | None = session.scalar(select(SuiteRow).where(SuiteRow.name == name, SuiteRow.hash == digest))
        if same is not None:  # the same content is the same version
            return same
        parts = document_parts(session, document)
        row = SuiteRow(
            name=name,
            hash=digest,
            legacy_document={},
            parts=parts,
            case_count=len(parts["cases"]),
            toolset_version_id=toolset_version_id(),
            version=(last.version if last else 0) + 1,
            parent_id=parent_id,
        )
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:  # the number (or this very content) was stored by another writer meanwhile
            continue
        return row
    raise Conflict(f"suite {name!r}: too many versions stored at once, try again")


def newest_of_each(session: Session, *, limit: int, always: str | None = None) -> list[SuiteRow]:
    """The newest version of each suite name (by name), at most ``limit`` of
    them; the newest of ``always`` is among them even past the limit."""
    top = (
        select(SuiteRow.name, func.max(SuiteRow.version).label("v"))
        .group_by(SuiteRow.name)
        .order_by(SuiteRow.name)
        .limit(limit)
        .subquery()
    )
    rows = list(
        session.scalars(
            select(SuiteRow)
            .options(defer(SuiteRow.parts), defer(SuiteRow.legacy_document))
            .join(top, (SuiteRow.name == top.c.name) & (SuiteRow.version == top.c.v))
            .order_by(SuiteRow.name)
        )
    )
    if always is not None and all(r.name != always for r in rows):
        own = newest(session, always)
        if own is not None:
            rows.append(own)
    return rows
