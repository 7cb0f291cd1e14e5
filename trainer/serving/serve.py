"""A policy server: a trained model behind HTTP, for a game engine in any language.

    python -m trainer serve runs/<run_id> [--host 127.0.0.1] [--port 8000] [--api-key KEY]

    POST /v1/act     {"obs": [...] or [[...], ...], "deterministic": true}  ->  {"actions": [...]}
                     (discrete actions: optional "action_mask": [true, false, ...] per observation)
    GET  /v1/model   the env, the observation and action spaces, the training step
    GET  /healthz    {"status": "ok"}  (no key needed: for load balancers and supervisors)

`actions` has one entry per observation (a single observation gives a list of one): an integer
for a discrete action space, a list of floats (clipped to the bounds) for a continuous one.
`deterministic` (default true) takes the most likely action; false samples from the policy.
`action_mask` (discrete actions, optional): the allowed actions, n booleans (or 0 / 1) for one
observation or one such row per observation; a forbidden action is never returned. A mask of the
wrong shape or one that allows no action for some observation is a 422 that says so.
A recurrent policy (`model_type: ppo-lstm`) needs `"session": "<id>"`, the same in every request
of a client: the server keeps that session's state (one per observation row) from one request to
the next (`Sessions`: at most `MAX_SESSIONS`, the least recently used forgotten first), and
`"episode_start": true` (or one boolean per observation) starts an episode afresh.

Requests that arrive while a forward pass runs wait for the next one and go through it
together (`Batcher`): one pass for many clients, which is what makes 64 concurrent clients
cheap. Bad requests get a 4xx whose `detail` says what was expected. What a client may send
(body, JSON, content type, deadlines, connections) is bounded by trainer/serving/http_limits.py;
the body of POST /v1/act is checked by trainer/serving/act_request.py.

The server listens on 127.0.0.1 unless told otherwise; bound to any other address it needs an
API key (`--api-key` or the RL_STUDIO_API_KEY environment variable), which clients send as
`Authorization: Bearer KEY` or `X-API-Key: KEY`.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at runtime.
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from trainer.run.checkpoint import TrainedModel, load_model
from trainer.serving.act_request import MAX_ROWS, check_act_request, check_session, expected_request
from trainer.serving.batcher import Batcher, Pending, ServeStats
from trainer.serving.bind import PublicBindError, key_matches, presented_key, require_key_for_public_bind
from trainer.serving.http_limits import MAX_BODY_BYTES, install_error_handlers, read_json
from trainer.serving.http_server import (
    DEFAULT_LIMITS,
    ServerHandle,
    ServerLimits,
    bounded_server,
    listen,
    listen_failure,
)
from trainer.serving.sessions import MAX_SESSIONS, Sessions, recurrent_pass

API_KEY_ENV = "RL_STUDIO_API_KEY"


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
            **(
                {"session": "your id (required: the server keeps its state)", "episode_start": "optional booleans"}
                if model.policy.recurrent
                else {}
            ),
            **(
                {"action_mask": f"optional: {model.spec['action']['n']} booleans per observation, true = allowed"}
                if model.spec["action"]["kind"] == "discrete"
                else {}
            ),
        },
    }


def create_app(
    model: TrainedModel,
    api_key: str | None = None,
    batching: bool = True,
    max_rows: int = MAX_ROWS,
    max_wait_s: float = 0.0,
    source: str | None = None,
    max_sessions: int = MAX_SESSIONS,
):
    """The FastAPI app serving `model` (batched, or one forward pass per request with batching=False);
    a recurrent policy keeps the state of at most `max_sessions` client sessions."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    app = FastAPI(title="RL Studio policy server", version="1", docs_url="/docs", redoc_url=None)
    install_error_handlers(app)
    stats = ServeStats()
    sessions = Sessions(max_sessions)
    batcher = Batcher(model, stats, max_rows, max_wait_s, sessions) if batching else None
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

    action = model.spec["action"]
    mask_size = int(action["n"]) if action["kind"] == "discrete" else None
    recurrent = model.policy.recurrent
    expected = expected_request(model.observation_shape, mask_size, recurrent)

    def check(request: Any) -> tuple[Any, ...]:
        obs, deterministic, mask = check_act_request(request, model.observation_shape, max_rows, mask_size)
        return obs, deterministic, mask, *check_session(request, len(obs), recurrent)

    @app.post("/v1/act")
    async def act(request: Request):
        obs, deterministic, mask, session, starts = await read_json(
            request, MAX_BODY_BYTES, hint=expected, convert=check
        )
        stats.requests += 1
        if batcher is not None:
            actions = await batcher.act(obs, deterministic, mask, session, starts)
        elif recurrent:  # in the event loop: the session's state is read and written in order
            request = Pending(obs, deterministic, None, mask, session, starts)
            actions = recurrent_pass(model.policy, sessions, [request], deterministic, mask)
            stats.forward_passes += 1
        else:
            actions = await asyncio.to_thread(
                lambda: model.predict(obs, deterministic=deterministic, action_masks=mask)[0]
            )
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
