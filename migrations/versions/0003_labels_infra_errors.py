"""outcome labels (human and judge) and infrastructure errors of runs

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outcome_labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("label", sa.String(length=20), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["trajectory_id"], ["trajectories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("trajectory_id", "source", name="uq_outcome_label"),
    )
    with op.batch_alter_table("outcome_labels", schema=None) as batch_op:
        batch_op.create_index("ix_labels_run_source", ["run_id", "source"], unique=False)
    op.create_table(
        "infra_errors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Text(), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("fault_key", sa.String(length=100), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", "trial", "fault_key", name="uq_infra_error"),
    )


def downgrade() -> None:
    op.drop_table("infra_errors")
    with op.batch_alter_table("outcome_labels", schema=None) as batch_op:
        batch_op.drop_index("ix_labels_run_source")
    op.drop_table("outcome_labels")
