"""Usage: a trajectory's model requests and token sums, a call's latency

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKENS = ("input_tokens", "output_tokens", "cached_tokens", "total_tokens")


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(
            sa.Column("model_calls", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True)
        )
        for name in TOKENS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("model_latency_ms", sa.Float(), nullable=True))
    with op.batch_alter_table("calls") as batch:
        batch.add_column(sa.Column("latency_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("delay_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("delay_ms")
        batch.drop_column("latency_ms")
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("model_latency_ms")
        for name in reversed(TOKENS):
            batch.drop_column(name)
        batch.drop_column("model_calls")
