"""The master's port: a node proves the run's token before anything of the run is shared.

    worker                                   master (HOST:54321)
    POST /v1/challenge                 ->    {"challenge": C}             (random, single use, 60 s)
    POST /v1/join {C, N, node, proof}  ->    {"run": R, "proof": P}       (or 403 / 429)
      proof = HMAC(token, "join|C|N|node")   P = HMAC(token, "master|C|N|sha256(R)")

R holds what a node needs and an outsider must not have: the run's config, the rendezvous id
(128 random bits, the name of every key of the run in the c10d store), the store's address and
the key that signs the rendezvous state. Both sides prove the token and it never crosses the
wire; failed proofs are throttled per address (trainer/serving/throttle.py), and nothing an outsider
can read allows an offline guess. The worker checks P before it trusts a byte of R.
"""
# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at runtime.

import hashlib
import hmac
import json
import math
import os
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, OrderedDict
from collections.abc import Callable

from trainer.config.checks import ConfigError
from trainer.serving.throttle import FailureThrottle, retry_after

TOKEN_ENV = "RL_STUDIO_TOKEN"
MIN_TOKEN_LENGTH = 20
MIN_TOKEN_BITS = 64  # Shannon estimate over the token's own characters
GENERATE_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(16))"'
CHALLENGE_SECONDS = 60.0
MAX_CHALLENGES = 10_000
MAX_JOIN_BYTES = 64 * 1024  # a join request or answer is a few hundred bytes


class RefusedError(RuntimeError):
    """The master refused this node, or the node refused the master; the message says why."""


# ---------------------------------------------------------------------------------------------
# The token


def new_token() -> str:
    """128 random bits, URL-safe (22 characters). Never one that starts with "-": the commands
    printed with it (`--token T`) would read it as an option (1 token in 64 otherwise)."""
    while True:
        token = secrets.token_urlsafe(16)
        if token_bits(token) >= MIN_TOKEN_BITS and not token.startswith("-"):
            return token


def token_bits(token: str) -> float:
    """About how many bits of guessing `token` takes, from its own character frequencies."""
    if not token:
        return 0.0
    counts = Counter(token)
    return -sum(n * math.log2(n / len(token)) for n in counts.values())


def check_token(token: str, source: str = "--token") -> str:
    """Refuse a token an attacker could guess: shorter than 20 characters or of low entropy."""
    if len(token) < MIN_TOKEN_LENGTH or token_bits(token) < MIN_TOKEN_BITS:
        raise ConfigError(
            f"{source}: the token is too easy to guess ({len(token)} characters, about {token_bits(token):.0f} bits; "
            f"at least {MIN_TOKEN_LENGTH} characters and {MIN_TOKEN_BITS} bits needed). Leave the token out and the "
            f"master makes one, or generate one with: {GENERATE_HINT}"
        )
    return token


def resolve_token(given: str | None, generate: bool) -> str | None:
    """--token, else RL_STUDIO_TOKEN, else (a master) a new random token; a given one is checked."""
    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return check_token(token, "--token" if given else TOKEN_ENV)
    return new_token() if generate else None


def mac(token: str, *parts: str) -> str:
    return hmac.new(token.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


def digest(run: dict) -> str:
    return hashlib.sha256(json.dumps(run, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# The master's side


class AdmissionGate:
    """Answers challenges and joins. `admit(request, address)` registers an admitted node and
    returns None, or a reason to refuse it (the run is full, ...)."""

    def __init__(
        self,
        token: str,
        run: dict,
        admit: Callable[[dict, str], str | None],
        say: Callable[[str], None],
        throttle: FailureThrottle | None = None,
    ):
        self.token, self.run, self.admit, self.say = token, run, admit, say
        self.throttle = throttle or FailureThrottle()
        self.challenges: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def challenge(self) -> dict:
        with self._lock:
            now = time.monotonic()
            while self.challenges and (
                len(self.challenges) >= MAX_CHALLENGES or next(iter(self.challenges.values())) < now
            ):
                self.challenges.popitem(last=False)
            value = secrets.token_hex(16)
            self.challenges[value] = now + CHALLENGE_SECONDS
            return {"challenge": value}

    def _take_challenge(self, value: str) -> bool:
        with self._lock:
            expires = self.challenges.pop(value, None)
            return expires is not None and expires >= time.monotonic()

    def join(self, request: dict, address: str) -> tuple[int, dict]:
        """(HTTP status, answer) for a join request from `address` (the socket's peer)."""
        wait = self.throttle.wait_left(address)
        if wait:
            return 429, {"detail": f"too many failed joins from {address}; try again in {retry_after(wait)} s"}
        fields = {name: request.get(name) for name in ("challenge", "nonce", "node", "proof", "host", "hostname")}
        nproc = request.get("nproc")
        if (
            not all(isinstance(value, str) and 0 < len(value) <= 256 for value in fields.values())
            or isinstance(nproc, bool)
            or not isinstance(nproc, int)
            or not 0 <= nproc <= 1024
        ):
            return 422, {
                "detail": "a join request needs challenge, nonce, node, host, hostname and proof (strings) "
                "and nproc (0..1024, 0: the run's own): use `python -m trainer worker`"
            }
        expected = mac(self.token, "join", fields["challenge"], fields["nonce"], fields["node"])
        if not self._take_challenge(fields["challenge"]) or not hmac.compare_digest(expected, fields["proof"]):
            locked = self.throttle.failed(address)
            self.say(
                f"Worker refused: {address} (wrong token)"
                + (f"; further joins from it wait {retry_after(locked)} s" if locked else "")
            )
            return 403, {
                "detail": "wrong token: give this run's token with --token or RL_STUDIO_TOKEN (the master "
                "printed it when it started)"
            }
        self.throttle.succeeded(address)
        reason = self.admit({**fields, "nproc": nproc}, address)
        if reason is not None:
            return 409, {"detail": reason}
        return 200, {
            "run": self.run,
            "proof": mac(self.token, "master", fields["challenge"], fields["nonce"], digest(self.run)),
        }

    def app(self):
        """The gate as an ASGI app: JSON only, bounded bodies, a 4xx with a message for anything else."""
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        from trainer.serving.http_limits import install_error_handlers, read_json

        app = FastAPI(title="RL Studio cluster gate", docs_url=None, redoc_url=None, openapi_url=None)
        install_error_handlers(app)

        @app.post("/v1/challenge")
        async def challenge() -> dict:
            return self.challenge()

        @app.post("/v1/join")
        async def join(request: Request):
            body = await read_json(request, MAX_JOIN_BYTES, hint="a join request from `python -m trainer worker`")
            if not isinstance(body, dict):
                return JSONResponse({"detail": "a join request is a JSON object"}, status_code=422)
            status, answer = self.join(body, request.client.host if request.client else "unknown")
            return JSONResponse(answer, status_code=status)

        return app


# ---------------------------------------------------------------------------------------------
# A node's side


def _post(url: str, body: dict, timeout: float) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read(MAX_JOIN_BYTES + 1)[:MAX_JOIN_BYTES] or b"{}")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read(MAX_JOIN_BYTES))
        except ValueError:
            return error.code, {"detail": f"HTTP {error.code}"}


def request_admission(master: str, token: str, host: str, nproc: int, timeout: float = 30.0) -> tuple[str, dict]:
    """Prove the token to the master at HOST:PORT and check its proof; (node id, the run)."""
    base = f"http://{master}"
    try:
        _, answer = _post(f"{base}/v1/challenge", {}, timeout)
        node = f"{host}/{os.getpid()}/{secrets.token_hex(4)}"
        nonce = secrets.token_hex(16)
        challenge = str(answer.get("challenge", ""))
        status, answer = _post(
            f"{base}/v1/join",
            {
                "challenge": challenge,
                "nonce": nonce,
                "node": node,
                "host": host,
                "hostname": socket.gethostname(),
                "nproc": nproc,
                "proof": mac(token, "join", challenge, nonce, node),
            },
            timeout,
        )
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cannot reach the master at {master} ({getattr(error, 'reason', error)}); is `python -m "
            f"trainer master` running there, and is the port open?"
        ) from None
    if status != 200:
        raise RefusedError(f"refused by the master at {master}: {str(answer.get('detail', f'HTTP {status}'))[:500]}")
    run = answer.get("run")
    if not isinstance(run, dict) or not hmac.compare_digest(
        str(answer.get("proof", "")), mac(token, "master", challenge, nonce, digest(run))
    ):
        raise RefusedError(
            f"the server at {master} did not prove this run's token: it is not the master you "
            f"meant (nothing it sent was used)"
        )
    return node, run
