"""mcp-serve: pending records in a table of their own, not in the run's config

A run recorded before this revision keeps its pending records (under
``live_pending`` in ``runs.config``): they are carried over, one row each,
and the key leaves the config. Downgrading puts them back.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "live_pending"  # the config key of the records before this revision
JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("config", JSONType))
pending = sa.table(
    "live_pending",
    sa.column("id", sa.BigInteger()),
    sa.column("run_id", sa.Integer()),
    sa.column("key", sa.Text()),
    sa.column("case_id", sa.Text()),
    sa.column("trial", sa.Integer()),
    sa.column("record", JSONType),
)


def _row(run_id: int, key: str, record: Any) -> dict[str, Any]:  # as app/store/live.py save_pending
    fields = record if isinstance(record, dict) else {}
    return {
        "run_id": run_id,
        "key": key,
        "case_id": str(fields.get("case_id", "")),
        "trial": int(fields.get("trial") or 0),
        "record": record,
    }


def upgrade() -> None:
    op.create_table(
        "live_pending",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("case_id", sa.Text(), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("record", JSONType, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "key", name="uq_live_pending_run_key"),
    )
    conn = op.get_bind()
    for run_id, config in conn.execute(sa.select(runs.c.id, runs.c.config).order_by(runs.c.id)).all():
        if not isinstance(config, dict) or PENDING not in config:
            continue
        records = config.pop(PENDING)
        if isinstance(records, dict) and records:
            conn.execute(pending.insert(), [_row(run_id, key, record) for key, record in records.items()])
        conn.execute(runs.update().where(runs.c.id == run_id).values(config=config))


def downgrade() -> None:
    conn = op.get_bind()
    held: dict[int, dict[str, Any]] = {}
    for run_id, key, record in conn.execute(
        sa.select(pending.c.run_id, pending.c.key, pending.c.record).order_by(pending.c.id)
    ).all():
        held.setdefault(run_id, {})[key] = record
    for run_id, records in held.items():
        config = conn.execute(sa.select(runs.c.config).where(runs.c.id == run_id)).scalar_one()
        conn.execute(
            runs.update()
            .where(runs.c.id == run_id)
            .values(config={**(config if isinstance(config, dict) else {}), PENDING: records})
        )
    op.drop_table("live_pending")
