"""suite versions: one number per (name, version), documents stored as deduplicated parts

Versions of a name that share a number (concurrent writers before this
revision) are numbered again in the order they were stored; the unique index
then refuses a second row with the same number. Each stored document is
split into its head and its cases, each kept once in ``suite_parts`` by
content hash; ``suites.parts`` lists a version's hashes, ``case_count``
how many cases it has (what a list of versions shows, without the parts).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
suites = sa.table(
    "suites",
    sa.column("id", sa.Integer()),
    sa.column("name", sa.String()),
    sa.column("version", sa.Integer()),
    sa.column("document", JSONType),
    sa.column("parts", JSONType),
    sa.column("case_count", sa.Integer()),
)
parts_table = sa.table("suite_parts", sa.column("hash", sa.String()), sa.column("document", JSONType))


def _hash(value: Any) -> str:  # as app/store/suites.py part_hash
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def upgrade() -> None:
    op.create_table(
        "suite_parts",
        sa.Column("hash", sa.String(64), primary_key=True),
        sa.Column("document", JSONType, nullable=False),
    )
    op.add_column("suites", sa.Column("parts", JSONType, nullable=True))
    op.add_column("suites", sa.Column("case_count", sa.Integer(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(suites.c.id, suites.c.name, suites.c.version).order_by(suites.c.name, suites.c.version, suites.c.id)
    ).all()
    by_name: dict[str, list[tuple[int, int]]] = {}
    for sid, name, version in rows:
        by_name.setdefault(name, []).append((sid, version))
    for versions in by_name.values():
        if len({v for _, v in versions}) < len(versions):  # a number taken twice: number them again, in order
            for number, (sid, _) in enumerate(versions, start=1):
                conn.execute(suites.update().where(suites.c.id == sid).values(version=number))
    op.create_index("uq_suite_version", "suites", ["name", "version"], unique=True)
    stored: set[str] = set()
    for (sid,) in conn.execute(sa.select(suites.c.id).order_by(suites.c.id)).all():
        document = conn.execute(sa.select(suites.c.document).where(suites.c.id == sid)).scalar_one()
        if not isinstance(document, dict):
            continue
        cases = document.get("cases")
        pieces = [{**document, "cases": None}, *(cases if isinstance(cases, list) else [])]
        hashes = [_hash(p) for p in pieces]
        for h, piece in zip(hashes, pieces, strict=True):
            if h not in stored:
                stored.add(h)
                conn.execute(parts_table.insert().values(hash=h, document=piece))
        conn.execute(
            suites.update()
            .where(suites.c.id == sid)
            .values(document={}, parts={"head": hashes[0], "cases": hashes[1:]}, case_count=len(hashes) - 1)
        )


def downgrade() -> None:
    conn = op.get_bind()
    for sid, parts in conn.execute(sa.select(suites.c.id, suites.c.parts).where(suites.c.parts.isnot(None))).all():
        head = conn.execute(sa.select(parts_table.c.document).where(parts_table.c.hash == parts["head"])).scalar_one()
        cases = [
            conn.execute(sa.select(parts_table.c.document).where(parts_table.c.hash == h)).scalar_one()
            for h in parts["cases"]
        ]
        conn.execute(suites.update().where(suites.c.id == sid).values(document={**head, "cases": cases}))
    op.drop_index("uq_suite_version", "suites")
    op.drop_column("suites", "case_count")
    op.drop_column("suites", "parts")
    op.drop_table("suite_parts")
