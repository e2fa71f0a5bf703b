"""A partial index on calls by run in latency order: a run's tool-latency percentiles read at their rank

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LATENCY = sa.text("latency_ms IS NOT NULL")


def upgrade() -> None:
    # the usage figures of a run without kept aggregates (finished before 0014, not backfilled): its tool
    # latencies' p50 and p95 are the values at two ranks, read walking this index (2 million calls: the
    # values were read into Python and sorted, 1.3 s a run of 384,000 trajectories on SQLite)
    op.create_index(
        "ix_calls_run_latency_order",
        "calls",
        ["run_id", "latency_ms", "trajectory_id"],
        sqlite_where=LATENCY,
        postgresql_where=LATENCY,
    )


def downgrade() -> None:
    op.drop_index("ix_calls_run_latency_order", "calls")
