"""The FastAPI app the plugin mounts on the api-server at ``/k8s-retry``.

Airflow does not authenticate plugin apps: a mount inherits none of the core API's dependencies.
Every route here therefore resolves the caller with Airflow's own ``get_user`` (the UI's session
cookie or a bearer token, checked by the configured auth manager), and shows only DAGs whose XComs
the auth manager lets that user read. A browser without a session is sent to Airflow's login page
and back; an API client gets 401.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_k8s_retry.plugins.failures import DEFAULT_HOURS, RANGES, Summary, summarize
from airflow_k8s_retry.plugins.page import render
from airflow_k8s_retry.plugins.tries import load_records


async def current_user(request: Request) -> BaseUser:
    """The caller, authenticated by Airflow's auth manager (401/403 otherwise)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, oauth2_scheme

    return await get_user(request, await oauth2_scheme(request), await bearer_scheme(request))


#: The caller, as a route parameter (FastAPI resolves annotations at module level).
User = Annotated[BaseUser, Depends(current_user)]


def readable_dags(user: BaseUser, candidates: set[str]) -> set[str]:
    """The DAGs among ``candidates`` whose XComs ``user`` may read."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    manager = get_auth_manager()
    allowed = manager.get_authorized_dag_ids(user=user, method="GET") & candidates
    return {
        dag_id
        for dag_id in allowed
        if manager.is_authorized_dag(
            method="GET", access_entity=DagAccessEntity.XCOM, details=DagDetails(id=dag_id), user=user
        )
    }


def _window(hours: int) -> tuple[datetime, datetime, timedelta]:
    if hours not in RANGES:
        raise HTTPException(422, f"hours must be one of {', '.join(map(str, RANGES))}, got {hours}")
    until = datetime.now(UTC)
    return until - timedelta(hours=hours), until, RANGES[hours]


def summary_for(user: BaseUser, dag_id: str | None, hours: int) -> tuple[Summary, list[str]]:
    since, until, bucket = _window(hours)
    records = load_records(since, until, dag_id or None)
    allowed = readable_dags(user, {r.dag_id for r in records})
    mine = [r for r in records if r.dag_id in allowed]
    return summarize(mine, since=since, until=until, bucket=bucket), sorted(allowed)


def create_app() -> FastAPI:
    app = FastAPI(title="airflow-k8s-retry failures", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def login_first(request: Request, exc: HTTPException) -> Response:
        wants_page = "text/html" in request.headers.get("accept", "") and not request.url.path.endswith(
            "/api/failures"
        )
        if exc.status_code == 401 and wants_page:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), 307)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.get("/", response_class=HTMLResponse)
    def page(
        request: Request,
        user: User,
        dag_id: Annotated[str | None, Query()] = None,
        hours: Annotated[int, Query()] = DEFAULT_HOURS,
    ) -> HTMLResponse:
        summary, dag_ids = summary_for(user, dag_id, hours)
        base = str(request.base_url).rstrip("/")
        return HTMLResponse(render(summary, dag_ids=dag_ids, dag_id=dag_id or None, hours=hours, base=base))

    @app.get("/api/failures")
    def failures(
        user: User,
        dag_id: Annotated[str | None, Query()] = None,
        hours: Annotated[int, Query()] = DEFAULT_HOURS,
    ) -> dict[str, Any]:
        summary, dag_ids = summary_for(user, dag_id, hours)
        return {"dag_ids": dag_ids, **summary.to_json()}

    return app
