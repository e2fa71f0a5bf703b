"""What comparisons read, kept when a run is finished: its usage before prices, its pairing with the run before it

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # the first comparison of two large runs read every trajectory's usage and every call's latency
    # of both (seconds per 100,000 trajectories); a finished run keeps what that read gave, here
    op.create_table(
        "run_aggregates",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("trajectories", sa.BigInteger(), nullable=False),
        sa.Column("usage", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    )
    # and the join of two runs' trajectories by (case, trial, fault), seconds at 100,000s of trajectories
    op.create_table(
        "run_pairings",
        sa.Column("a_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("b_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("a_trajectories", sa.BigInteger(), nullable=False),
        sa.Column("b_trajectories", sa.BigInteger(), nullable=False),
        sa.Column("shared", sa.BigInteger(), nullable=False),
        sa.Column("only_a", sa.BigInteger(), nullable=False),
        sa.Column("only_b", sa.BigInteger(), nullable=False),
        sa.Column("flipped", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    )
    op.create_index("ix_run_pairings_b_id", "run_pairings", ["b_id"])


def downgrade() -> None:
    op.drop_index("ix_run_pairings_b_id", "run_pairings")
    op.drop_table("run_pairings")
    op.drop_table("run_aggregates")
