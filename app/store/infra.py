"""Infrastructure errors of a run: case runs the model endpoint kept failing.
They are not failed cases; ``--resume`` retries them and clears them once
stored."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.store.models import InfraError

MAX_MESSAGE = 2000


def record_infra_error(session: Session, run_id: int, case_id: str, trial: int, fault_key: str, message: str) -> None:
    session.execute(
        delete(InfraError).where(
            InfraError.run_id == run_id,
            InfraError.case_id == case_id,
            InfraError.trial == trial,
            InfraError.fault_key == fault_key,
        )
    )
    session.add(
        InfraError(run_id=run_id, case_id=case_id, trial=trial, fault_key=fault_key, message=message[:MAX_MESSAGE])
    )


def clear_infra_error(session: Session, run_id: int, case_id: str, trial: int) -> None:
    """Forget the error of a case run now stored."""
    session.execute(
        delete(InfraError).where(InfraError.run_id == run_id, InfraError.case_id == case_id, InfraError.trial == trial)
    )


def count_infra_errors(session: Session, run_id: int) -> int:
    return session.scalar(select(func.count()).select_from(InfraError).where(InfraError.run_id == run_id)) or 0


def infra_errors(session: Session, run_id: int, limit: int = 200) -> list[InfraError]:
    return list(
        session.scalars(select(InfraError).where(InfraError.run_id == run_id).order_by(InfraError.id).limit(limit))
    )
