"""One place that turns domain errors into HTTP answers with a body that
says what is wrong (``ErrorBody``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.errors import InvalidTrajectory, SuiteError, ToolLensError, ToolSpecError
from app.store.errors import Conflict, NotFound, SchemaMismatch
from app.web.schemas import ErrorBody, ErrorItem


def error_response(status: int, error: str, items: list[ErrorItem] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(error=error, detail=items or [])
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ToolLensError)
    async def _domain(request: Request, exc: ToolLensError) -> JSONResponse:
        if isinstance(exc, NotFound):
            return error_response(404, str(exc))
        if isinstance(exc, Conflict):
            return error_response(409, str(exc))
        if isinstance(exc, InvalidTrajectory):
            return error_response(422, str(exc), [ErrorItem(index=exc.index, field=exc.field or None,
                                                            message=exc.detail)])
        if isinstance(exc, SuiteError):
            return error_response(422, str(exc), [ErrorItem(field=exc.field or None, message=exc.detail)])
        if isinstance(exc, ToolSpecError):
            return error_response(422, str(exc))
        if isinstance(exc, SchemaMismatch):
            return error_response(503, str(exc))
        return error_response(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        items = []
        for err in exc.errors():
            loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
            items.append(ErrorItem(field=".".join(loc) or None, message=str(err.get("msg", "invalid"))))
        return error_response(422, "invalid request: " + "; ".join(
            f"{i.field}: {i.message}" if i.field else i.message for i in items), items)

    @app.exception_handler(DataError)
    async def _data(request: Request, exc: DataError) -> JSONResponse:
        # e.g. a NUL character, which PostgreSQL text cannot hold
        reason = str(exc.orig).splitlines()[0] if exc.orig else "value out of range"
        return error_response(422, f"the database cannot store a value of this request: {reason}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))
