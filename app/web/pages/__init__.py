"""The HTML pages, one module each: its route, its typed context and the
builder of that context; the templates only display it."""

from __future__ import annotations

from fastapi import APIRouter

from app.web.pages import compare, run, runs, toolsets, trajectory

router = APIRouter(include_in_schema=False)
for page in (runs, run, trajectory, compare, toolsets):
    router.include_router(page.router)
