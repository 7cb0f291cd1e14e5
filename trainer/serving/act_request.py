"""The body of the policy server's POST /v1/act (trainer/serving/serve.py), checked: observations,
`deterministic`, the optional `action_mask` of a discrete policy, and a recurrent policy's
`session` (the client's id, whose state the server keeps) and `episode_start`. Anything else is a
BodyError (a 4xx) whose message says what was expected."""

import json
from typing import Any

import numpy as np

from trainer.serving.http_limits import BodyError

MAX_ROWS = 4096  # observations in one request
NUMBER_TYPES = frozenset({int, float})  # what JSON numbers parse to (bool is neither)
REQUEST_KEYS = ("obs", "deterministic", "action_mask", "session", "episode_start")
MAX_SESSION_CHARS = 128


def expected_request(observation_shape: tuple[int, ...], mask_size: int | None = None, recurrent: bool = False) -> str:
    shape_text = f"[{', '.join(map(str, observation_shape))}]"
    mask = "" if mask_size is None else f', "action_mask": <optional: {mask_size} booleans per observation>'
    session = ', "session": <your id>, "episode_start": <optional: a boolean per observation>' if recurrent else ""
    return (
        f'expected a JSON object {{"obs": <one observation of shape {shape_text} or a list of them>, '
        f'"deterministic": true|false{mask}{session}}}'
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
    request: Any, observation_shape: tuple[int, ...], max_rows: int = MAX_ROWS, mask_size: int | None = None
) -> tuple[np.ndarray, bool, np.ndarray | None]:
    """(obs batch float32 (B, *observation_shape), deterministic, action mask bool (B, mask_size) or
    None) from the parsed body, or BodyError saying what was expected. mask_size: the number of
    discrete actions (None: continuous, where a mask is refused)."""
    shape_text = f"[{', '.join(map(str, observation_shape))}]"
    expected = expected_request(observation_shape, mask_size)
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
    mask = request.get("action_mask")
    return obs, deterministic, None if mask is None else check_mask(mask, len(obs), mask_size)


def check_session(request: dict, rows: int, recurrent: bool) -> tuple[str | None, np.ndarray | None]:
    """(session, episode_start bool (rows,) or None) of a checked request. A recurrent policy needs
    `session`: the id under which the server keeps the state of the client's envs; any other
    policy ignores both keys."""
    session, starts = request.get("session"), request.get("episode_start")
    if not recurrent:
        return None, None
    if not isinstance(session, str) or not 1 <= len(session) <= MAX_SESSION_CHARS:
        raise BodyError(
            422,
            f'this policy is recurrent: send "session": an id of 1 to {MAX_SESSION_CHARS} characters, the same '
            f"in every request of a game (the server keeps its state), got {json.dumps(session)[:40]}",
        )
    if starts is None:
        return session, None
    table = [starts] if type(starts) is bool else starts
    if not (isinstance(table, list) and len(table) == rows and all(type(value) is bool for value in table)):
        raise BodyError(
            422,
            f"'episode_start' must be true / false for one observation or a list of {rows} (one per "
            f"observation): true where a new episode starts, got {json.dumps(starts)[:40]}",
        )
    return session, np.asarray(table, dtype=np.bool_)


def check_mask(mask: Any, rows: int, mask_size: int | None) -> np.ndarray:
    """A request's `action_mask` as bool (rows, mask_size), or a 422 saying what was expected."""
    if mask_size is None:
        raise BodyError(422, "'action_mask' is for discrete actions; this model's actions are continuous")
    one = f"[{mask_size} booleans]"
    expected = f"{one} for one observation or [{rows}, {mask_size}] (one row per observation)"
    flat = mask if rows == 1 and isinstance(mask, list) and all(type(v) is not list for v in mask) else None
    table = [flat] if flat is not None else mask
    if not (isinstance(table, list) and all(isinstance(row, list) for row in table)):
        raise BodyError(422, f"'action_mask' must be {expected}")
    if len(table) != rows or any(len(row) != mask_size for row in table):
        shape = list(np.asarray(mask, dtype=object).shape)
        raise BodyError(422, f"'action_mask' has shape {shape}; expected {expected}")
    if not all(type(value) is bool or (type(value) is int and value in (0, 1)) for row in table for value in row):
        raise BodyError(422, "'action_mask' must hold true / false (or 1 / 0) only")
    array = np.asarray(table, dtype=np.bool_)
    empty = np.flatnonzero(~array.any(1))
    if empty.size:
        raise BodyError(
            422, f"'action_mask' allows no action for observation {int(empty[0])}: each row needs at least one true"
        )
    return array
