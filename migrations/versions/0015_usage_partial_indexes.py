"""Partial indexes for a run's usage figures: its calls with a latency, its trajectories with model requests

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LATENCY = sa.text("latency_ms IS NOT NULL")
MODEL_CALLS = sa.text("model_calls IS NOT NULL")


def upgrade() -> None:
    # the first view of a run after a batch read every call of the run for the latencies and every
    # trajectory for its model requests (0.3 s at 10^6 calls, when none has either): these hold only the
    # rows that have them, so a run without costs nothing and a run with reads the index alone (latencies)
    op.create_index(
        "ix_calls_run_latency",
        "calls",
        ["run_id", "trajectory_id", "name", "latency_ms"],
        sqlite_where=LATENCY,
        postgresql_where=LATENCY,
    )
    op.create_index(
        "ix_traj_run_model_calls",
        "trajectories",
        ["run_id", "id"],
        sqlite_where=MODEL_CALLS,
        postgresql_where=MODEL_CALLS,
    )


def downgrade() -> None:
    op.drop_index("ix_traj_run_model_calls", "trajectories")
    op.drop_index("ix_calls_run_latency", "calls")
