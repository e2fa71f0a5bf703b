"""suite versions: a number per suite name and the version a curated one was made from

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # plain columns, no foreign key: SQLite adds and drops them in place, without rebuilding the
    # table the runs refer to
    op.add_column("suites", sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("suites", sa.Column("parent_id", sa.Integer(), nullable=True))
    # the suites stored already: numbered per name in the order they were stored
    suites = sa.table(
        "suites", sa.column("id", sa.Integer()), sa.column("name", sa.String()), sa.column("version", sa.Integer())
    )
    conn = op.get_bind()
    seen: dict[str, int] = {}
    for sid, name in conn.execute(sa.select(suites.c.id, suites.c.name).order_by(suites.c.id)).all():
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            conn.execute(suites.update().where(suites.c.id == sid).values(version=seen[name]))


def downgrade() -> None:
    op.drop_column("suites", "parent_id")
    op.drop_column("suites", "version")
