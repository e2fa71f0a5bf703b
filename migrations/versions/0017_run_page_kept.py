"""What a finished run's page shows that its counters alone make costly: pass^k, the pairs' rewrites

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a run page's first view computed pass^k for every k up to the trials of a case (9,035 at 10^6 calls)
    # and `toollens fix`'s rewrites of each confused pair (reading the run's first 1,000 good calls): a
    # finished run keeps both here, valid while it holds `trajectories` trajectories (`version`: of the
    # rewrites' wording; another one is computed again)
    op.create_table(
        "run_page_kept",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("trajectories", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("pass_hat_k", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("pair_edits", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_page_kept")
