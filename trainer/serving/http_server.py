"""The connection side of an HTTP server any client can reach: a listening socket, header and body
deadlines, a cap on open connections, and the server run from a thread (uvicorn underneath).
The body side (size, JSON, content type) is trainer/serving/http_limits.py."""

from __future__ import annotations

import asyncio
import errno
import http
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

HEADER_TIMEOUT_S = 10.0  # from a connection (or the previous response) to a request's complete headers
BODY_TIMEOUT_S = 30.0  # from the headers to the end of the body
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this
MAX_CONNECTIONS = 1000  # open connections per server, and never more than half the fd limit
MAX_HEADER_BYTES = 16 * 1024  # request line + headers (h11 answers 400 beyond it)
LISTEN_BACKLOG = 128  # asyncio accepts this many per loop turn before the cap sees them


class ServerStartError(RuntimeError):
    """A server could not start (the port is taken, the address is not this machine's)."""


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS


DEFAULT_LIMITS = ServerLimits()


def connection_cap(max_connections: int) -> int:
    """`max_connections`, but at most half this process's fd limit (the rest: files, the model, pipes)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):  # Windows has no RLIMIT_NOFILE
        return max_connections
    return max_connections if soft == resource.RLIM_INFINITY else max(1, min(max_connections, soft // 2))


def listen(host: str, port: int, backlog: int = LISTEN_BACKLOG) -> socket.socket:
    """A socket listening on host:port, or OSError (in use, not this machine's address, ...)."""
    infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, *_, address = min(infos, key=lambda info: info[0] != socket.AF_INET)  # localhost: 127.0.0.1
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "posix":  # a restart may take the port while the last run's connections linger
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def listen_failure(host: str, port: int, error: Exception, port_flag: str = "--port", host_flag: str = "--host") -> str:
    """'cannot listen on HOST:PORT (reason); what to change', for `error` from listen()."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    change = (
        f"choose another {port_flag}"
        if getattr(error, "errno", None) in (errno.EADDRINUSE, errno.EACCES)
        else f"{host_flag} must be an address of this machine"
    )
    return f"cannot listen on {where} ({getattr(error, 'strerror', None) or error}); {change}"


def _raw_response(status: int, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    return (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


def bounded_protocol(limits: ServerLimits = DEFAULT_LIMITS) -> type:
    """A uvicorn H11Protocol class (one per server) with header and body deadlines and a connection cap.

    At the cap, a new connection closes the oldest one still waiting for its headers (an attacker's
    half-sent request, or an idle keep-alive); when there is none, the new one is answered 503."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    cap = connection_cap(limits.max_connections)
    members: dict[Any, None] = {}  # this server's open connections
    waiting: dict[Any, None] = {}  # those waiting for a request's headers, oldest first

    class BoundedH11Protocol(H11Protocol):
        refused = False
        answered = False  # a response was sent: waiting for headers now is an idle keep-alive
        phase: str | None = None  # "headers" or "body": what the running deadline waits for
        timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            if len(members) >= cap:
                if not waiting:
                    self.refused = True
                    transport.write(
                        _raw_response(503, f"the server has {cap} connections open, its limit; retry in a moment")
                    )
                    transport.close()
                    return
                next(iter(waiting)).close_with(
                    503,
                    "the server is at its connection limit and closed this "
                    "connection, which had not sent a whole request",
                )
            members[self] = None
            super().connection_made(transport)
            self.watch()

        def connection_lost(self, exc) -> None:
            if not self.refused:
                self.forget()
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.watch()

        def on_response_complete(self) -> None:
            self.answered = True
            super().on_response_complete()
            self.watch()

        def send_400_response(self, msg: str) -> None:  # h11 could not parse the request: JSON, like the rest
            self.transport.write(
                _raw_response(400, f"not a valid HTTP/1.1 request, or its headers are over {MAX_HEADER_BYTES} bytes")
            )
            self.transport.close()

        def forget(self) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            members.pop(self, None)
            waiting.pop(self, None)
            self.phase = None

        def watch(self) -> None:
            """Start the deadline for what the connection now waits for from the client, if that changed."""
            state = self.conn.their_state
            phase = (
                None
                if self.transport.is_closing()
                else "headers"
                if state is h11.IDLE
                else "body"
                if state is h11.SEND_BODY
                else None
            )
            if phase == self.phase:
                return
            if self.timer is not None:
                self.timer.cancel()
            waiting.pop(self, None)
            self.phase, self.timer = phase, None
            if phase == "headers":
                waiting[self] = None
                self.timer = self.loop.call_later(limits.header_timeout_s, self.expire)
            elif phase == "body":
                self.timer = self.loop.call_later(limits.body_timeout_s, self.expire)

        def expire(self) -> None:
            seconds = limits.header_timeout_s if self.phase == "headers" else limits.body_timeout_s
            self.close_with(
                408, f"the request's {self.phase} did not arrive within {seconds:g} s; send the whole request at once"
            )

        def close_with(self, status: int, detail: str) -> None:
            """Close, answering `status` first unless the connection is an idle keep-alive or has its answer."""
            partial = self.phase == "headers" and (not self.answered or bool(self.conn.trailing_data[0]))
            cycle = self.cycle if self.phase == "body" else None
            self.forget()
            if self.transport.is_closing():
                return
            if partial or (cycle is not None and not cycle.response_started):
                self.transport.write(_raw_response(status, detail))
            if cycle is not None:  # the handler reading the body sees a disconnect
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.close()

    return BoundedH11Protocol


def bounded_server(app, limits: ServerLimits = DEFAULT_LIMITS, log_level: str = "warning"):
    """A uvicorn.Server for `app` with these limits; run it on sockets from `listen()`: `.run(sockets=[sock])`."""
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(
            app,
            http=bounded_protocol(limits),
            ws="none",
            lifespan="off",
            log_level=log_level,
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            backlog=LISTEN_BACKLOG,
        )
    )


class ServerHandle:
    """An app served from a thread of this process (the policy server, the cluster's admission gate).
    `what` names it in the errors, which are `error_type` (ServerStartError unless given)."""

    def __init__(
        self,
        app,
        host: str,
        port: int,
        limits: ServerLimits = DEFAULT_LIMITS,
        what: str = "the policy server",
        error_type: type[Exception] | None = None,
        port_flag: str = "port",
        host_flag: str = "host",
    ):
        error_type = error_type or ServerStartError
        try:
            sock = listen(host, port)
        except (OSError, OverflowError) as error:
            raise error_type(f"{what} {listen_failure(host, port, error, port_flag, host_flag)}") from None
        self.app = app
        self.server = bounded_server(app, limits)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name=f"http-server-{port}", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise error_type(f"{what} did not start on {host}:{port}; its log above says why")
            time.sleep(0.02)
        self.host = host
        self.port = sock.getsockname()[1]  # the real one when port=0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
