"""A policy server: a trained model behind HTTP, for a game engine in any language.

    python -m trainer serve runs/<run_id> [--host 127.0.0.1] [--port 8000] [--api-key KEY]

    POST /v1/act     {"obs": [...] or [[...], ...], "deterministic": true}  ->  {"actions": [...]}
    GET  /v1/model   the env, the observation and action spaces, the training step
    GET  /healthz    {"status": "ok"}  (no key needed: for load balancers and supervisors)

`actions` has one entry per observation (a single observation gives a list of one): an integer
for a discrete action space, a list of floats (clipped to the bounds) for a continuous one.
`deterministic` (default true) takes the most likely action; false samples from the policy.

Requests that arrive while a forward pass runs wait for the next one and go through it
together (`Batcher`): one pass for many clients, which is what makes 64 concurrent clients
cheap. Bad requests get a 4xx whose `detail` says what was expected. What a client may send
(body, JSON, content type, deadlines, connections) is bounded by trainer/serving/http_limits.py.

The server listens on 127.0.0.1 unless told otherwise; bound to any other address it needs an
API key (`--api-key` or the RL_STUDIO_API_KEY environment variable), which clients send as
`Authorization: Bearer KEY` or `X-API-Key: KEY`.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at runtime.
import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer.run.checkpoint import TrainedModel, load_model
from trainer.serving.bind import PublicBindError, key_matches, presented_key, require_key_for_public_bind
from trainer.serving.http_limits import MAX_BODY_BYTES, BodyError, install_error_handlers, read_json
from trainer.serving.http_server import (
    DEFAULT_LIMITS,
    ServerHandle,
    ServerLimits,
    bounded_server,
    listen,
    listen_failure,
)

API_KEY_ENV = "RL_STUDIO_API_KEY"
MAX_ROWS = 4096  # observations in one request
NUMBER_TYPES = frozenset({int, float})  # what JSON numbers parse to (bool is neither)
REQUEST_KEYS = ("obs", "deterministic")


class ServeError(ValueError):
    """The server cannot start as asked (e.g. a public address without an API key)."""


def check_bind(host: str, api_key: str | None) -> None:
    """A server reachable from other machines must have a key: anyone who reaches it could use it."""
    try:
        require_key_for_public_bind(
            host,
            api_key,
            what="the policy server",
            host_flag="--host",
            key_flag="--api-key",
            key_env=API_KEY_ENV,
            key_name="an API key",
        )
    except PublicBindError as error:
        raise ServeError(str(error)) from None


# ---------------------------------------------------------------------------------------------
# Requests


def expected_request(observation_shape: tuple[int, ...]) -> str:
    shape_text = f"[{', '.join(map(str, observation_shape))}]"
    return (
        f'expected a JSON object {{"obs": <one observation of shape {shape_text} or a list of them>, '
        f'"deterministic": true|false}}'
    )


def check_numbers(obs: Any) -> None:
    """422 unless `obs` is a number or nested lists of numbers: true, "1.5" or null are refused, not converted."""
    stack = [obs]
    while stack:
        item = stack.pop()
        if type(item) is list:
            if not set(map(type, item)) <= NUMBER_TYPES:  # one C-speed test per row on the usual path
                stack.extend(reversed(item))
        elif type(item) not in NUMBER_TYPES:
            raise BodyError(
                422, f"'obs' must hold numbers only; found {json.dumps(item)[:40]}: send 1.5, not \"1.5\" or true"
            )


def check_act_request(
    request: Any, observation_shape: tuple[int, ...], max_rows: int = MAX_ROWS
) -> tuple[np.ndarray, bool]:
    """(obs batch float32 (B, *observation_shape), deterministic) from the parsed body, or BodyError
    saying what was expected."""
    shape_text = f"[{', '.join(map(str, observation_shape))}]"
    expected = expected_request(observation_shape)
    if not isinstance(request, dict):
        raise BodyError(422, f"the body is a JSON {type(request).__name__}, not an object; {expected}")
    unknown = sorted(set(request) - set(REQUEST_KEYS))
    if unknown:
        raise BodyError(422, f"unknown key(s) {', '.join(map(repr, unknown))}; {expected}")
    if "obs" not in request:
        raise BodyError(422, f"the key 'obs' is missing; {expected}")
    deterministic = request.get("deterministic", True)
    if not isinstance(deterministic, bool):
        raise BodyError(422, f"'deterministic' must be true or false, got {json.dumps(deterministic)[:40]}")
    check_numbers(request["obs"])
    try:
        with np.errstate(over="ignore"):  # beyond float32: inf, refused below with its index
            obs = np.asarray(request["obs"], dtype=np.float32)
    except (TypeError, ValueError):
        raise BodyError(422, f"'obs' must be numbers in nested lists of equal length; {expected}") from None
    if obs.shape == observation_shape:
        obs = obs[None]
    elif obs.shape[1:] != observation_shape or obs.shape[0] == 0:
        raise BodyError(
            422,
            f"'obs' has shape {list(obs.shape)}; expected {shape_text} (one observation) or "
            f"[B, {shape_text[1:]} (a batch of B >= 1)",
        )
    if obs.shape[0] > max_rows:
        raise BodyError(413, f"'obs' holds {obs.shape[0]} observations; at most {max_rows} per request")
    if not np.isfinite(obs).all():
        bad = np.argwhere(~np.isfinite(obs))[0].tolist()
        raise BodyError(422, f"'obs' must be finite float32 numbers; found NaN or infinity at index {bad}")
    return obs, deterministic


# ---------------------------------------------------------------------------------------------
# Batching


@dataclass
class ServeStats:
    requests: int = 0
    forward_passes: int = 0
    largest_batch: int = 0


@dataclass
class _Pending:
    obs: np.ndarray
    deterministic: bool
    future: asyncio.Future = field(repr=False)


class Batcher:
    """Runs the model on every request waiting, as one batch.

    While a pass runs, new requests queue up; the next pass takes them all (up to `max_rows`
    observations), so the batch grows with the load and one client alone waits for nothing.
    `max_wait_s` > 0 holds the first request that long for company (more batching, more latency)."""

    def __init__(self, model: TrainedModel, stats: ServeStats, max_rows: int = MAX_ROWS, max_wait_s: float = 0.0):
        self.model, self.stats, self.max_rows, self.max_wait_s = model, stats, max_rows, max_wait_s
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        loop = asyncio.get_running_loop()
        if self.task is None or self.loop is not loop:  # started lazily, in the loop that serves
            self.loop, self.queue = loop, asyncio.Queue()
            self.task = loop.create_task(self._run(self.queue))
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(obs, deterministic, future))
        return await future

    async def _run(self, queue: asyncio.Queue) -> None:
        carry: _Pending | None = None  # a request that did not fit into the previous batch
        while True:
            batch = [carry if carry is not None else await queue.get()]
            carry = None
            # Let the handlers that are ready parse their requests and join this batch.
            await asyncio.sleep(self.max_wait_s)
            rows = len(batch[0].obs)
            while not queue.empty():
                pending = queue.get_nowait()
                if rows + len(pending.obs) > self.max_rows:
                    carry = pending
                    break
                batch.append(pending)
                rows += len(pending.obs)
            try:
                # In the event loop itself: a policy's pass takes far less than a hop to a worker
                # thread and back, and requests arriving meanwhile wait in the socket buffers,
                # to be parsed and queued for the next pass.
                results = self._forward(batch)
            except Exception as error:  # noqa: BLE001 - handed to the waiting requests
                results = [error] * len(batch)
            for pending, result in zip(batch, results):
                if pending.future.done():
                    continue  # the client went away
                if isinstance(result, Exception):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)

    def _forward(self, batch: list[_Pending]) -> list[np.ndarray]:
        """One forward pass per `deterministic` value present (usually one)."""
        results: list[Any] = [None] * len(batch)
        for deterministic in (True, False):
            members = [index for index, pending in enumerate(batch) if pending.deterministic == deterministic]
            if not members:
                continue
            obs = np.concatenate([batch[index].obs for index in members])
            actions = self.model.predict(obs, deterministic=deterministic)[0]
            self.stats.forward_passes += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(obs))
            start = 0
            for index in members:
                count = len(batch[index].obs)
                results[index] = actions[start : start + count]
                start += count
        return results


# ---------------------------------------------------------------------------------------------
# The app


def describe_model(model: TrainedModel, source: str | None = None) -> dict:
    """What GET /v1/model answers."""
    config = model.config
    return {
        "env_name": model.env_name,
        "model_type": model.spec["model_type"],
        "observation_space": {"shape": list(model.observation_shape), "dtype": "float32"},
        "action_space": model.spec["action"],
        "global_step": model.global_step,
        "algo": config.get("algo"),
        "norm_obs": bool(model.spec.get("norm_obs")),
        "source": source,
        "request": {
            "obs": f"one observation of shape {list(model.observation_shape)} or a list of up to {MAX_ROWS}",
            "deterministic": "true (default) or false",
        },
    }


def create_app(
    model: TrainedModel,
    api_key: str | None = None,
    batching: bool = True,
    max_rows: int = MAX_ROWS,
    max_wait_s: float = 0.0,
    source: str | None = None,
):
    """The FastAPI app serving `model` (batched, or one forward pass per request with batching=False)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    app = FastAPI(title="RL Studio policy server", version="1", docs_url="/docs", redoc_url=None)
    install_error_handlers(app)
    stats = ServeStats()
    batcher = Batcher(model, stats, max_rows, max_wait_s) if batching else None
    app.state.stats = stats
    description = describe_model(model, source)

    def error(status: int, detail: str) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=status)

    @app.exception_handler(HTTPException)
    async def no_such_route(request: Request, exc: HTTPException):  # 404, 405 (with its Allow header)
        return JSONResponse(
            {
                "detail": f"{exc.detail}: {request.method} {request.url.path[:100]}; this server "
                f"answers POST /v1/act, GET /v1/model and GET /healthz"
            },
            status_code=exc.status_code,
            headers=exc.headers,
        )

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/"):
            given = presented_key(request.headers.get("authorization"), request.headers.get("x-api-key"))
            if not key_matches(given, api_key):
                return error(401, "missing or wrong API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
        return await call_next(request)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/v1/model")
    async def model_info() -> dict:
        return {**description, "batching": batching, "stats": vars(stats)}

    expected = expected_request(model.observation_shape)

    def check(request: Any) -> tuple[np.ndarray, bool]:
        return check_act_request(request, model.observation_shape, max_rows)

    @app.post("/v1/act")
    async def act(request: Request):
        obs, deterministic = await read_json(request, MAX_BODY_BYTES, hint=expected, convert=check)
        stats.requests += 1
        if batcher is not None:
            actions = await batcher.act(obs, deterministic)
        else:
            actions = await asyncio.to_thread(lambda: model.predict(obs, deterministic=deterministic)[0])
            stats.forward_passes += 1
        return {"actions": actions.tolist()}

    return app


# ---------------------------------------------------------------------------------------------
# Running it


def start_server(
    model: TrainedModel | str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    limits: ServerLimits = DEFAULT_LIMITS,
    **app_options: Any,
) -> ServerHandle:
    """Serve `model` (a TrainedModel, .pth or run folder) from a background thread; port 0 picks a free one.
    `limits`: header and body deadlines and the connection cap (trainer/serving/http_limits.py)."""
    check_bind(host, api_key)
    source = None
    if not isinstance(model, TrainedModel):
        from trainer.serving.export import resolve_model_path

        path = resolve_model_path(model)
        source, model = path.name, load_model(path)
    return ServerHandle(
        create_app(model, api_key=api_key, source=source, **app_options), host, port, limits, error_type=ServeError
    )


def build_parser():
    from trainer.serving.export import model_parser

    parser = model_parser(
        "python -m trainer serve", "Serve a trained policy over HTTP: POST /v1/act, GET /v1/model, GET /healthz."
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; any other needs --api-key)",
    )
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"clients must send 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    parser.add_argument("--no-batching", action="store_true", help="one forward pass per request (for comparison)")
    return parser


def command(argv: list[str]) -> int:
    """The `serve` subcommand: runs until Ctrl-C; 2 with a message when it cannot start."""
    from trainer.run.checkpoint import CheckpointError
    from trainer.serving.export import ExportError, resolve_model_path

    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be 0..65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        check_bind(args.host, args.api_key)
        path = resolve_model_path(args.model)
        model = load_model(path, device=args.device)
    except (ServeError, ExportError, CheckpointError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        sock = listen(args.host, args.port)  # before "serving": a port in use is said, not logged after it
    except (OSError, OverflowError) as error:
        print(f"error: {listen_failure(args.host, args.port, error)}", file=sys.stderr)
        return 2
    app = create_app(model, api_key=args.api_key, batching=not args.no_batching, source=path.name)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"serving {path} ({model.env_name}, step {model.global_step}) on http://{host}:{sock.getsockname()[1]}  "
        f"POST /v1/act  GET /v1/model  GET /healthz",
        flush=True,
    )
    bounded_server(app).run(sockets=[sock])
    return 0
