"""Login throttling: a client address that keeps sending wrong passwords has to wait.

Gradio checks `--auth` passwords at `POST /login` and answers 400 for wrong ones, as fast as a
client can ask. This ASGI middleware counts each address's failed logins; after
`max_failures` within `window_seconds` that address gets `429 Too Many Requests` (with a
Retry-After header) for `lockout_seconds`, doubling on each further lockout. A successful login
clears the address's record. The address is the socket's peer, never a header a client sets.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field


@dataclass
class _Record:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0


class LoginThrottle:
    def __init__(self, app, max_failures: int = 5, window_seconds: float = 60.0, lockout_seconds: float = 30.0,
                 max_clients: int = 10_000, clock=time.monotonic):
        self.app = app
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.lockout_seconds = lockout_seconds
        self.max_clients = max_clients
        self.clock = clock
        self.records: dict[str, _Record] = {}

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith("/login"):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown",))[0]
        now = self.clock()
        record = self.records.get(client)
        if record is not None and record.locked_until > now:
            await self._refuse(send, record.locked_until - now)
            return
        status: dict = {}

        async def watch(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        await self.app(scope, receive, watch)
        self._count(client, status.get("code"), now)

    def _count(self, client: str, code: int | None, now: float) -> None:
        if code == 200:
            self.records.pop(client, None)
            return
        if code not in (400, 401):
            return
        if client not in self.records and len(self.records) >= self.max_clients:
            self._forget_oldest(now)
        record = self.records.setdefault(client, _Record())
        record.failures = [t for t in record.failures if now - t < self.window_seconds] + [now]
        if len(record.failures) >= self.max_failures:
            record.locked_until = now + self.lockout_seconds * 2 ** record.lockouts
            record.lockouts += 1
            record.failures.clear()

    def _forget_oldest(self, now: float) -> None:
        expired = [client for client, record in self.records.items()
                   if record.locked_until <= now and not record.failures]
        for client in expired or list(self.records)[: len(self.records) // 2]:
            self.records.pop(client, None)

    @staticmethod
    async def _refuse(send, seconds_left: float) -> None:
        wait = max(1, int(seconds_left + 0.999))
        body = json.dumps({"detail": f"Too many failed logins from this address; try again in {wait} s."}).encode()
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", str(wait).encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
