"""Where a Flappy Bird agent crashes, and why: the analysis behind its plateau between 50 and 100
pipes (docs/benchmarks.md#why-flappy-bird-plateaus).

    python -m benchmarks.flappy_deaths runs/<run>/flappy_bird_ppo_final.pth
    python -m benchmarks.flappy_deaths MODEL --envs 512 --steps 20000 --seed 123

Plays the model greedily in `--envs` games at once for `--steps` steps (a game that ends starts
again) and sorts every pipe the bird met by how far its gap lies below the gap of the pipe before
(px, positive: lower; the first pipe of a game has no pipe before), and every crash by what the
bird hit (the ground, the pipe above the gap or the pipe below it) and when (on the step it
entered the pipe's columns, or later inside them). It prints, per bin, the pipes met, the crashes
and the crash rate per pipe, so the bins where crashes concentrate stand out against how often
their pipes come.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor

from envs.flappy_bird import HALF_FIELD, FlappyBirdVecEnv
from envs.flappy_bird_screen import BIRD_HEIGHT, BIRD_WIDTH, BIRD_X, GROUND_Y, PIPE_WIDTH

# Bins of the drop from one gap to the next (px; the gap tops lie between 80 and 222).
DROP_EDGES = (-60, -20, 20, 60, 100)
FIRST = "first pipe"


def drop_bin(drop: float) -> str:
    """The bin of a drop, e.g. "+60 to +100 px"; FIRST for a game's first pipe (NaN)."""
    if drop != drop:
        return FIRST
    low = None
    for edge in DROP_EDGES:
        if drop < edge:
            return f"below {edge:+d} px" if low is None else f"{low:+d} to {edge:+d} px"
        low = edge
    return f"{low:+d} px or more"


BINS = (FIRST, *(drop_bin(edge - 1) for edge in DROP_EDGES), drop_bin(DROP_EDGES[-1]))


def analyse(
    act: Callable[[Tensor], Tensor], envs: int = 512, steps: int = 20_000, seed: int = 123, **env_kwargs
) -> dict:
    """Play `act` (observations -> actions) in `envs` Flappy Birds for `steps` steps; the pipes met
    and the crashes per drop bin, and the crashes by kind ("ground", "pipe above the gap, entering",
    "pipe below the gap, inside", ...). `env_kwargs`: the game's options (the model's observation
    among them); no step cap."""
    env = FlappyBirdVecEnv(envs, seed=seed, **{**env_kwargs, "max_steps": 10**9})
    obs = env.reset()
    last_gap = torch.full((envs,), float("nan"))  # the gap top of the pipe each bird passed last
    met, crashed, kinds = Counter(), Counter(), Counter()
    for _ in range(steps):
        actions = act(obs)
        pipe_x = env.pipe_offset + env._pipe_slot_column  # (P, N), before the step
        ahead = (pipe_x + PIPE_WIDTH <= BIRD_X).sum(0)  # the next pipe: the first not yet behind the bird
        gap = env._gaps.gather(0, ahead.unsqueeze(0)).squeeze(0)
        entering = pipe_x.gather(0, ahead.unsqueeze(0)).squeeze(0) >= BIRD_X + BIRD_WIDTH
        score_before = env.score.clone()
        obs, _, terminated, _, info = env.step(actions)
        # Where each bird ended the step (a crashed game has restarted by now): observation
        # column 0 is the bird's centre, -1 at the top of the screen and +1 on the ground.
        bird_y = (info["final_obs"][:, 0] + 1.0) * HALF_FIELD - BIRD_HEIGHT / 2
        passed = (env.score > score_before) & ~terminated
        ended = passed | terminated
        for index in ended.nonzero().flatten().tolist():
            bin_name = drop_bin(float(gap[index] - last_gap[index]))
            met[bin_name] += 1
            if terminated[index]:
                crashed[bin_name] += 1
                kinds[_crash_kind(float(bird_y[index]), float(gap[index]), bool(entering[index]))] += 1
        last_gap = torch.where(passed, gap, last_gap)
        last_gap = torch.where(terminated, float("nan"), last_gap)
    return {"met": met, "crashed": crashed, "kinds": kinds, "envs": envs, "steps": steps}


def _crash_kind(bird_y: float, gap_top: float, entering: bool) -> str:
    """What a bird whose top edge ended the step at `bird_y` hit."""
    if bird_y >= GROUND_Y - BIRD_HEIGHT - 0.01:  # the ground stops the bird at its top edge
        return "ground"
    side = "above" if bird_y < gap_top else "below"
    return f"pipe {side} the gap, {'entering' if entering else 'inside'}"


def report(result: dict) -> str:
    met, crashed = result["met"], result["crashed"]
    total_met, total_crashed = sum(met.values()), sum(crashed.values())
    lines = [
        f"{result['envs']} games x {result['steps']:,} steps: {total_met:,} pipes met, {total_crashed:,} crashes "
        f"({1000 * total_crashed / max(total_met, 1):.1f} per 1,000 pipes)",
        "",
        "| gap below the one before | pipes met | share of pipes | crashes | share of crashes | crashes per 1,000 pipes |",
        "|---|---|---|---|---|---|",
    ]
    for name in BINS:
        pipes, crashes = met.get(name, 0), crashed.get(name, 0)
        lines.append(
            f"| {name} | {pipes:,} | {100 * pipes / max(total_met, 1):.1f}% | {crashes:,} | "
            f"{100 * crashes / max(total_crashed, 1):.1f}% | {1000 * crashes / max(pipes, 1):.1f} |"
        )
    lines += ["", "| what the bird hit | crashes | share |", "|---|---|---|"]
    for kind, count in result["kinds"].most_common():
        lines.append(f"| {kind} | {count:,} | {100 * count / max(total_crashed, 1):.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flappy_deaths", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a Flappy Bird model (.pth) the trainer wrote")
    parser.add_argument("--envs", type=int, default=512, help="games played at once (default 512)")
    parser.add_argument("--steps", type=int, default=20_000, help="steps of every game (default 20,000)")
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args(argv)
    from envs.registry import played_env_kwargs
    from trainer.run.checkpoint import load_model

    torch.set_num_threads(1)
    model = load_model(args.model)

    def act(obs: Tensor) -> Tensor:
        return torch.as_tensor(model.predict(obs, deterministic=True)[0])

    # The model's own game, without the options that only shaped its training (`hard_pipes`).
    env_kwargs = played_env_kwargs("flappy_bird", model.config.get("env_kwargs"))
    if env_kwargs.get("obs") == "pixels":
        parser.error("the analysis reads where each bird crashed from its vector observation; this model sees pixels")
    print(report(analyse(act, args.envs, args.steps, args.seed, **env_kwargs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
