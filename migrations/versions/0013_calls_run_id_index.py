"""An index on calls by run in id order: the run page reads a run's first good calls without sorting the run

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # the examples `toollens fix` and the run page quote (the run's first 1,000 good calls in id order):
    # walked in the index's order and stopped at the limit, instead of every call of the run read and sorted
    op.create_index("ix_calls_run_order", "calls", ["run_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_calls_run_order", "calls")
