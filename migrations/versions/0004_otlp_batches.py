"""OTLP staging by export request: a row per request instead of a row per span

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "otlp_batches",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=8), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,  # an id is never used again: the receiver keys batches by it
    )
    op.create_table(
        "otlp_batch_done",
        sa.Column("batch_id", ID, nullable=False),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["otlp_batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "trace_id"),
    )
    # spans staged by an older receiver and not stored yet: one batch of one line each
    as_bytes = "convert_to(span, 'UTF8')" if op.get_bind().dialect.name == "postgresql" else "CAST(span AS BLOB)"
    op.execute(
        f"INSERT INTO otlp_batches (id, run_id, format, body) SELECT id, run_id, 'lines', {as_bytes} FROM otlp_spans"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "SELECT setval(pg_get_serial_sequence('otlp_batches', 'id'), "
            "coalesce((SELECT max(id) FROM otlp_batches), 0) + 1, false)"
        )
    op.drop_table("otlp_spans")


def downgrade() -> None:
    waiting = op.get_bind().execute(sa.text("SELECT count(*) FROM otlp_batches")).scalar_one()
    if waiting:
        raise RuntimeError(
            f"{waiting} OTLP export requests are staged and not stored yet: start the server "
            "once (it stores them), stop it, then downgrade"
        )
    op.drop_table("otlp_batch_done")
    op.drop_table("otlp_batches")
    op.create_table(
        "otlp_spans",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("span", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
