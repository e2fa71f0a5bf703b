"""Indexes for the run page's filters on runs of millions: passed and outcome in id order, calls by tool

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a page of passed (or failed) trajectories in id order, and its deep offsets, from the index alone
    op.drop_index("ix_traj_run_passed", "trajectories")
    op.create_index("ix_traj_run_passed", "trajectories", ["run_id", "passed", "id"])
    op.create_index("ix_traj_run_outcome", "trajectories", ["run_id", "outcome", "id"])
    # the trajectories that called a tool (the heatmap's column of an invented tool), from the index alone
    op.drop_index("ix_calls_tool", "calls")
    op.create_index("ix_calls_tool", "calls", ["run_id", "name", "trajectory_id"])
    # comparing two runs joins their trajectories by case, trial and fault: from the index alone
    op.create_index(
        "ix_traj_run_key_passed", "trajectories", ["run_id", "case_id", "trial", "fault_key", "passed", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_traj_run_key_passed", "trajectories")
    op.drop_index("ix_calls_tool", "calls")
    op.create_index("ix_calls_tool", "calls", ["run_id", "name"])
    op.drop_index("ix_traj_run_outcome", "trajectories")
    op.drop_index("ix_traj_run_passed", "trajectories")
    op.create_index("ix_traj_run_passed", "trajectories", ["run_id", "passed"])
