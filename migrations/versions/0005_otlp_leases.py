"""OTLP staging owned by one server (leases) and stored traces recognised in the database

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "otlp_leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("beat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.add_column("otlp_batches", sa.Column("lease_id", sa.Integer(), nullable=True))
    op.create_index("ix_otlp_batches_lease_id", "otlp_batches", ["lease_id"])
    op.create_table(
        "otlp_traces",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("span_ids", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("flushes", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "trace_id"),
    )


def downgrade() -> None:
    op.drop_table("otlp_traces")
    op.drop_index("ix_otlp_batches_lease_id", "otlp_batches")
    with op.batch_alter_table("otlp_batches", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("lease_id")
    op.drop_table("otlp_leases")
