"""One place that turns domain errors into HTTP answers with a body that
says what is wrong (``ErrorBody``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.core.errors import InvalidTrajectory, SuiteError, ToolLensError, ToolSpecError
from app.core.suites.suite_check import SuiteProblems
from app.store.db import busy_error
from app.store.errors import Busy, Conflict, NotFound, SchemaMismatch, Unreachable, Unstorable
from app.web.schemas import ErrorBody, ErrorItem


def error_response(
    status: int, error: str, items: list[ErrorItem] | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=error, detail=items or [])
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def respond(
    request: Request,
    status: int,
    error: str,
    items: list[ErrorItem] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """JSON under /api and for clients that do not ask for HTML; a page otherwise."""
    wants_page = wants_html(request)
    if wants_page and hasattr(request.app.state, "templates"):
        response: HTMLResponse = request.app.state.templates.TemplateResponse(
            request, "error.html", {"status": status, "error": error}, status_code=status
        )
        return response
    return error_response(status, error, items, headers)


def wants_html(request: Request) -> bool:
    """A person's browser on a page's route: it asks for HTML, and the path (below the app's root path,
    which a proxy may leave in it) is not the API's."""
    path, root = request.url.path, str(request.scope.get("root_path", "")).rstrip("/")
    if root and path.startswith(root + "/"):
        path = path[len(root) :]
    return not path.startswith("/api") and "text/html" in request.headers.get("accept", "")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ToolLensError)
    async def _domain(request: Request, exc: ToolLensError) -> Response:
        if isinstance(exc, NotFound):
            return respond(request, 404, str(exc))
        if isinstance(exc, Conflict):
            return respond(request, 409, str(exc))
        if isinstance(exc, InvalidTrajectory):
            return respond(
                request, 422, str(exc), [ErrorItem(index=exc.index, field=exc.field or None, message=exc.detail)]
            )
        if isinstance(exc, SuiteProblems):
            return respond(
                request, 422, exc.headline, [ErrorItem(field=p.field or None, message=str(p)) for p in exc.problems]
            )
        if isinstance(exc, SuiteError):
            return respond(request, 422, str(exc), [ErrorItem(field=exc.field or None, message=exc.detail)])
        if isinstance(exc, ToolSpecError):
            return respond(request, 422, str(exc))
        if isinstance(exc, Unstorable):
            return respond(request, 422, str(exc))
        if isinstance(exc, Busy):
            return respond(request, 503, str(exc), headers={"Retry-After": str(exc.retry_after)})
        if isinstance(exc, (SchemaMismatch, Unreachable)):
            return respond(request, 503, str(exc))
        return respond(request, 400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        items = []
        for err in exc.errors():
            loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
            items.append(ErrorItem(field=".".join(loc) or None, message=str(err.get("msg", "invalid"))))
        return respond(
            request,
            422,
            "invalid request: " + "; ".join(f"{i.field}: {i.message}" if i.field else i.message for i in items),
            items,
        )

    @app.exception_handler(DataError)
    async def _data(request: Request, exc: DataError) -> Response:
        # e.g. a NUL character, which PostgreSQL text cannot hold
        reason = str(exc.orig).splitlines()[0] if exc.orig else "value out of range"
        return respond(request, 422, f"the database cannot store a value of this request: {reason}")

    @app.exception_handler(OperationalError)
    async def _operational(request: Request, exc: OperationalError) -> Response:
        # a lock that outlasted the wait outside a session's scope, or a database gone
        busy = busy_error(exc)
        if busy is not None:
            return respond(request, 503, str(busy), headers={"Retry-After": str(busy.retry_after)})
        reason = str(exc.orig or exc).strip().splitlines()
        return respond(
            request,
            503,
            f"the database cannot answer: {reason[0] if reason else 'no reason'}",
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # every method of the path, not only those of the route that matched first
            allow = ", ".join(path_methods(request.app, request.url.path))
            if request.method == "OPTIONS":  # a path the app has: what it answers there
                return Response(status_code=204, headers={"Allow": allow})
            headers = {**(headers or {}), "Allow": allow}
        return respond(request, exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # a defect: the server logs it with its traceback (Starlette raises it again after this answer);
        # a person gets a page, a client JSON, neither the exception's text
        return respond(request, 500, "something went wrong on the server: the error is in its log")


def path_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the app answers on ``path`` (OPTIONS included), in a fixed order."""
    methods = [
        m
        for m in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
        if any(
            route.matches({"type": "http", "path": path, "method": m, "root_path": ""})[0] == Match.FULL
            for route in app.router.routes
        )
    ]
    return sorted([*methods, "OPTIONS"]) if methods else []
