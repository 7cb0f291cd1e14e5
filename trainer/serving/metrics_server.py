"""The trainer's `--metrics-port`: its run's Prometheus metrics over HTTP, on a daemon thread.

    python -m trainer --config configs/cartpole.yaml --metrics-port 9109   # http://127.0.0.1:9109/metrics

It listens on 127.0.0.1 unless `--metrics-host` says otherwise; any other address needs a key
(`--metrics-key` or RL_STUDIO_METRICS_KEY) that each scrape sends as `Authorization: Bearer KEY`
(Prometheus: `authorization: {credentials: KEY}`), 401 without it. The rule is trainer/serving/bind.py's,
the policy server's too. What is served is trainer/serving/metrics_export.py's collector.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from trainer.serving.bind import key_matches, presented_key, require_key_for_public_bind
from trainer.serving.metrics_export import MetricsSink, RunsCollector

METRICS_KEY_ENV = "RL_STUDIO_METRICS_KEY"


def check_metrics_bind(host: str, key: str | None) -> None:
    """`--metrics-host` beyond this machine needs `--metrics-key` (trainer/serving/bind.py's rule)."""
    require_key_for_public_bind(
        host,
        key,
        what="the trainer's /metrics",
        host_flag="--metrics-host",
        key_flag="--metrics-key",
        key_env=METRICS_KEY_ENV,
    )


def _with_key(app, key: str | None):
    """The WSGI `app`, answering 401 unless the request brings `key` (no key: `app` as it is)."""
    if not key:
        return app

    def guarded(environ, start_response):
        given = presented_key(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_X_API_KEY"))
        if key_matches(given, key):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("WWW-Authenticate", 'Bearer realm="rlstudio trainer metrics"'),
            ],
        )
        return [
            (
                b"metrics need the trainer's --metrics-key: send 'Authorization: Bearer KEY' "
                b"(Prometheus: authorization: {credentials: KEY})\n"
            )
        ]

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # no line per scrape on the trainer's console
        pass


class MetricsServer:
    """`/metrics` for one trainer process, on a daemon thread (prometheus_client's WSGI app).

    Listens on 127.0.0.1 unless told otherwise; any other address needs `key`, which each scrape
    must bring as `Authorization: Bearer KEY` (401 without it)."""

    def __init__(
        self,
        sink: MetricsSink,
        port: int,
        host: str = "127.0.0.1",
        runs_dir: str | Path | None = None,
        key: str | None = None,
    ):
        check_metrics_bind(host, key)
        self.registry = CollectorRegistry()
        self.registry.register(RunsCollector(lambda: [sink.sample()], runs_dir))

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET

        try:
            self.server = make_server(
                host.strip("[]"),
                port,
                _with_key(make_wsgi_app(self.registry), key),
                Server,
                handler_class=_QuietHandler,
            )
        except (OSError, OverflowError) as error:
            reason = getattr(error, "strerror", None) or error
            raise OSError(
                f"--metrics-port {port}: cannot listen on {host}:{port} ({reason}); pick a free port"
            ) from None
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics-server", daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the socket is bound to: the real port when 0 was asked."""
        return self.server.server_address[:2]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_trainer_metrics(
    port: int, host: str = "127.0.0.1", runs_dir: str | Path | None = None, key: str | None = None
) -> tuple[MetricsSink, MetricsServer]:
    """The sink to add to the trainer's sinks, and the server publishing it (close() it at the end)."""
    sink = MetricsSink()
    return sink, MetricsServer(sink, port, host, runs_dir, key)
