"""The studio's `/metrics`: every run it knows, in the Prometheus text format.

The metric names, labels and the collector are trainer/serving/metrics_export.py's (one table for the
studio and a headless trainer alike); this module only turns the studio's RunSnapshots into the
collector's RunSamples and serves them on Gradio's FastAPI app, as a route handed to the app
when it is built (`launch_options(...)["app_kwargs"]["routes"]`).

With `--auth` the endpoint asks for the same user and password by HTTP basic auth (Prometheus:
`basic_auth` in the scrape config); without it, it is as open as the studio. Wrong passwords here
count in the studio's one login throttle (studio/throttle.py), as wrong ones at the login page do.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from studio.history import RunSnapshot
from studio.runs import RunManager
from studio.throttle import basic_credentials
from trainer.run.owner import read_owner
from trainer.run.status import ACTIVE_STATUSES
from trainer.serving.metrics_export import DEFAULT_FALLING_UPDATES, RunSample, RunsCollector


def run_sample(snapshot: RunSnapshot) -> RunSample:
    """What the exporter needs of one run the studio shows."""
    checkpoint_at = None
    if snapshot.latest_checkpoint:
        try:
            checkpoint_at = Path(snapshot.latest_checkpoint).stat().st_mtime
        except OSError:
            checkpoint_at = None
    owner = read_owner(snapshot.run_dir) if snapshot.status in ACTIVE_STATUSES else None
    return RunSample(
        run_id=snapshot.run_id,
        env=snapshot.env_name,
        model=str(snapshot.config.get("model_type") or "?"),
        status=snapshot.status,
        metrics=snapshot.metrics[-1] if snapshot.metrics else None,
        returns=[point.get("recent_return_mean") for point in snapshot.metrics],
        last_checkpoint_at=checkpoint_at,
        started_at=snapshot.started_at,
        pid=owner.pid if owner is not None else None,
        falling_threshold=int(snapshot.config.get("warn_falling_updates") or DEFAULT_FALLING_UPDATES),
    )


def metrics_registry(manager: RunManager) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(
        RunsCollector(lambda: [run_sample(snapshot) for snapshot in manager.list_runs()], manager.runs_dir)
    )
    return registry


def _authorised(request: Request, auth: tuple[str, str] | None) -> bool:
    if auth is None:
        return True
    user, password = basic_credentials(request.headers.get("authorization")) or ("", "")
    return hmac.compare_digest(user.encode(), auth[0].encode()) & hmac.compare_digest(
        password.encode(), auth[1].encode()
    )


def metrics_route(manager: RunManager, auth: tuple[str, str] | None = None) -> Route:
    """GET /metrics for the studio's FastAPI app (a sync endpoint: Starlette runs it on a worker
    thread, so reading the runs folder never blocks the event loop)."""
    registry = metrics_registry(manager)

    def endpoint(request: Request) -> Response:
        if not _authorised(request, auth):
            return Response(
                "metrics need the studio's --auth user and password (HTTP basic auth)\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="rlstudio metrics"'},
            )
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", endpoint, methods=["GET"])
