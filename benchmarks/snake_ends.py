"""How a Snake agent's games end, and why: won (the board filled), crashed or starved, at what
length; and for the starved games, how often the food could be reached at all. The analysis
behind docs/benchmarks.md#snake-on-10-x-10-filling-the-board.

    python -m benchmarks.snake_ends runs/<run>/snake_ppo_final.pth
    python -m benchmarks.snake_ends MODEL --games 1000 --seed 11 --env-option max_steps_without_food=1000

Plays the model greedily, one game in each of `--games` envs (a game that ends is not
restarted), on the env options the model was trained with (`--env-option` overrides one). A game
starved when it ended on its hunger limit (truncated, or a death with `hunger_kills`). For the
starved games of an `obs: space` model, the last `max_steps_without_food` steps are read back
from its own observations: the share of them in which some move had the food in its region. For
an `obs: cycle` model, its own observations say when it first broke its body's cycle order (took
a move that left the body out of order while one that kept it was there).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
from torch import Tensor

from envs.snake import SnakeVecEnv
from envs.snake_board import VECTOR_OBS_SIZE
from envs.snake_space import PER_MOVE, SPACE_FEATURES

ENDINGS = ("won", "crashed", "starved")
FOOD_FLAGS = slice(VECTOR_OBS_SIZE + PER_MOVE.index("food reachable"), None, len(PER_MOVE))
SAFE_FLAGS = slice(VECTOR_OBS_SIZE + SPACE_FEATURES + 1, None, 3)  # obs "cycle": each move's "ahead of the tail"


def analyse(act: Callable[[Tensor], Tensor], games: int = 200, seed: int = 11, **env_kwargs) -> dict:
    """Play `act` (observations -> actions) once in each of `games` Snakes: each game's ending
    and final length, and (obs "space") per starved game the share of its last hunger-limit steps
    with the food in reach of some move."""
    env = SnakeVecEnv(games, seed=seed, **env_kwargs)
    obs = env.reset()
    finished = torch.zeros(games, dtype=torch.bool)
    ending, length = [""] * games, [0] * games
    food_seen = torch.zeros(env.max_steps_without_food, games, dtype=torch.bool)  # a ring of the last steps
    in_reach: list[float] = []
    first_break = torch.zeros(games, dtype=torch.int64)  # obs "cycle": the length when it broke the order, 0: never
    step = 0
    while not bool(finished.all()):
        if env.obs_mode == "space":
            food_seen[step % len(food_seen)] = obs[:, FOOD_FLAGS].amax(1) > 0
        hunger, before = env.steps_without_food.clone(), env.length.clone()
        actions = act(obs)
        if env.obs_mode == "cycle":
            safe = obs[:, SAFE_FLAGS] > 0
            breaks = safe.any(1) & ~safe.gather(1, actions.view(-1, 1)).squeeze(1) & ~finished & (first_break == 0)
            first_break = torch.where(breaks, env.length, first_break)
        obs, reward, terminated, truncated, _ = env.step(actions)
        step += 1
        for index in ((terminated | truncated) & ~finished).nonzero().flatten().tolist():
            grown = int(before[index]) + int(reward[index] > 0)
            starved = bool(hunger[index] + 1 >= env.max_steps_without_food)
            ending[index] = "won" if grown >= env.num_cells else ("starved" if starved else "crashed")
            length[index] = grown
            if ending[index] == "starved" and env.obs_mode == "space":
                in_reach.append(float(food_seen[:, index].float().mean()))
        finished |= terminated | truncated
    return {
        "games": games,
        "cells": env.num_cells,
        "hunger_limit": env.max_steps_without_food,
        "endings": {kind: sorted(n for e, n in zip(ending, length) if e == kind) for kind in ENDINGS},
        "food_in_reach_when_starved": statistics.mean(in_reach) if in_reach else None,
        "first_break": {kind: [int(first_break[i]) for i in range(games) if ending[i] == kind] for kind in ENDINGS}
        if env.obs_mode == "cycle"
        else None,
    }


def report(result: dict) -> str:
    lines = [
        f"{result['games']} greedy games on {result['cells']} cells (hunger limit {result['hunger_limit']} steps)",
        "",
        "| ending | games | share | final length: median (quartiles) |",
        "|---|---|---|---|",
    ]
    for kind, lengths in result["endings"].items():
        quartiles = statistics.quantiles(lengths, n=4) if len(lengths) > 1 else lengths * 3
        spread = f"{statistics.median(lengths):g} ({quartiles[0]:g} - {quartiles[2]:g})" if lengths else "-"
        lines.append(f"| {kind} | {len(lengths):,} | {100 * len(lengths) / result['games']:.1f}% | {spread} |")
    if result["food_in_reach_when_starved"] is not None:
        lines += [
            "",
            f"Starved games: some move had the food in reach in {100 * result['food_in_reach_when_starved']:.1f}% "
            f"of their last {result['hunger_limit']} steps.",
        ]
    if result["first_break"] is not None:
        lines += [
            "",
            "| ending | broke the cycle order | length when it first did: median (quartiles) |",
            "|---|---|---|",
        ]
        for kind, breaks in result["first_break"].items():
            at = [n for n in breaks if n > 0]
            quartiles = statistics.quantiles(at, n=4) if len(at) > 1 else at * 3
            spread = f"{statistics.median(at):g} ({quartiles[0]:g} - {quartiles[2]:g})" if at else "-"
            lines.append(f"| {kind} | {len(at):,} of {len(breaks):,} | {spread} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.snake_ends", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a Snake model (.pth) the trainer wrote")
    parser.add_argument("--games", type=int, default=200, help="games played, one per env (default 200)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--env-option", action="append", default=[], metavar="KEY=VALUE", help="override an env option")
    args = parser.parse_args(argv)
    from trainer.config.loading import parse_override
    from trainer.run.checkpoint import load_model

    torch.set_num_threads(1)
    model = load_model(args.model)
    env_kwargs = dict(model.config.get("env_kwargs") or {})
    env_kwargs.update(parse_override(text, "--env-option", "max_steps_without_food=1000") for text in args.env_option)

    def act(obs: Tensor) -> Tensor:
        return torch.as_tensor(model.predict(obs, deterministic=True)[0])

    print(report(analyse(act, args.games, args.seed, **env_kwargs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
