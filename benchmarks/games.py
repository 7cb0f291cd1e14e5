"""The games section of the suite: what every shipped game config reaches, honestly.

    python -m benchmarks --only games                       every game config, 3 seeds, its whole budget
    python -m benchmarks --only games --seeds 2 --game-configs snake.yaml,flappy_bird.yaml
    python -m benchmarks --only games --quick               50k steps, 1 seed, 10 games: checks that it runs

Every config in the configs folder whose env is a game (Snake, Flappy Bird; `GAMES`) trains for
its stated `total_timesteps` on each seed, each run in a fresh process, and its final model then
plays greedily (the most likely action) `--game-episodes` games (default 100) on held-out env
seeds (`EVAL_SEED_OFFSET` + the training seed: boards and pipes the run never trained on).
Flappy Bird is evaluated with its step cap raised to `FLAPPY_EVAL_PIPES` pipes (the env's
`max_steps`), the bar published "perfect" bots are judged on; a game that lasts it "reached the
cap". A Snake game that fills the board is a win.

The table (console, games.md, games.json in the results folder) gives per config: the budget,
the median training seconds, the mean greedy score of each seed's games averaged over seeds and
its minimum over seeds, the worst single game, and the share of games won and of games that
reached the cap, over every evaluated game of every seed.

This module imports no torch at the top: the parent process of the suite only orchestrates.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

GAMES = ("snake", "flappy_bird")  # canonical env names (envs.resolve_env_name) that count as games
FLAPPY_EVAL_PIPES = 1000
EVAL_SEED_OFFSET = 10_000
QUICK_STEPS = 50_000  # --quick: every config trains this many steps instead of its budget
QUICK_EPISODES = 10


def game_configs(folder: Path, names: list[str] | None = None) -> list[tuple[Path, str]]:
    """(path, canonical env name) of every config in `folder` whose env is a game, by file name;
    `names` (file names) picks some of them and must all exist."""
    from envs import resolve_env_name
    from trainer.config.defaults import load_config

    if names:
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"no config {', '.join(missing)} in {folder}")
        paths = [folder / name for name in names]
    else:
        paths = sorted(folder.glob("*.yaml"))
    found = []
    for path in paths:
        try:
            env_name = resolve_env_name(load_config(path).env_name)
        except Exception:  # noqa: BLE001 - not a training config (cluster.yaml's hosts...) or a broken one
            if names:
                raise
            continue
        if env_name in GAMES:
            found.append((path, env_name))
        elif names:
            raise ValueError(f"{path.name} trains {env_name}, not a game ({', '.join(GAMES)})")
    return found


def flappy_steps_for_pipes(pipes: int, env_kwargs: dict | None = None) -> int:
    """Steps a bird that never crashes takes to pass `pipes` pipes: the first pipe enters at the
    right edge and is passed when its centre crosses the bird's; the next come every
    `pipe_spacing / pipe_speed` steps."""
    from envs import flappy_bird as flappy

    env = flappy.FlappyBirdVecEnv(num_envs=1, **(env_kwargs or {}))
    crossing = flappy.BIRD_X + flappy.BIRD_WIDTH / 2 - flappy.PIPE_WIDTH / 2
    first = math.ceil((flappy.SCREEN_WIDTH - crossing) / env.pipe_speed)
    return first + math.ceil((pipes - 1) * env.pipe_spacing / env.pipe_speed)


def evaluation_env_kwargs(env_name: str, saved: dict | None) -> dict:
    """The env options the greedy games run with: the config's own but its training-only ones (a
    curriculum), Flappy Bird's cap raised."""
    from envs.registry import played_env_kwargs

    kwargs = played_env_kwargs(env_name, saved)
    if env_name == "flappy_bird":
        kwargs["max_steps"] = flappy_steps_for_pipes(FLAPPY_EVAL_PIPES, kwargs)
    return kwargs


# ---------------------------------------------------------------------------------------------
# One seed of one config, in its fresh process


def ours_shipped_game(
    config_path: str,
    seed: int = 0,
    episodes: int = 100,
    total_timesteps: int | None = None,
    device: str = "cpu",
    keep_models: str | None = None,
) -> dict[str, Any]:
    """Train `config_path` as shipped (its budget, or `total_timesteps`) with `seed`, then play
    its final model greedily for `episodes` games on env seed EVAL_SEED_OFFSET + seed. With
    `keep_models`, the final model is copied there as CONFIG_seedN.pth (else it is deleted)."""
    from benchmarks.ours import MetricsRecorder, _load
    from envs import resolve_env_name
    from trainer.run.loop import train
    from trainer.serving.evaluate import evaluate

    overrides = [f"device={device}", f"seed={seed}"]
    if total_timesteps is not None:
        overrides.append(f"total_timesteps={total_timesteps}")
    config = _load(config_path, overrides)
    env_name = resolve_env_name(config.env_name)
    env_kwargs = evaluation_env_kwargs(env_name, config.env_kwargs)
    with tempfile.TemporaryDirectory(prefix="rl_studio_bench_game_") as run_dir:
        start = time.perf_counter()
        recorder = MetricsRecorder("recent_score_mean", [], None, start)
        trained = train(config, Path(run_dir) / "run", sinks=[recorder], should_stop=recorder.should_stop)
        train_seconds = time.perf_counter() - start
        start = time.perf_counter()
        played = evaluate(
            trained.final_model,
            episodes=episodes,
            num_envs=episodes,
            seed=EVAL_SEED_OFFSET + seed,
            deterministic=True,
            max_episode_steps=env_kwargs.get("max_steps", 100_000) + 1,
            env_kwargs=env_kwargs,
        )
        eval_seconds = time.perf_counter() - start
        kept = None
        if keep_models is not None:
            kept = Path(keep_models) / f"{Path(config_path).stem}_seed{seed}.pth"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(trained.final_model, kept)
    evaluation = played.as_dict()
    del evaluation["returns"], evaluation["lengths"]
    return {
        "config": Path(config_path).name,
        "env_name": env_name,
        "algo": config.algo,
        "seed": seed,
        "eval_seed": EVAL_SEED_OFFSET + seed,
        "eval_env_kwargs": env_kwargs,
        "steps": int(trained.step),
        "budget": int(config.total_timesteps),  # what it trained for: the config's, or total_timesteps given
        "shipped_budget": int(_load(config_path, []).total_timesteps),
        "train_seconds": train_seconds,
        "steps_per_second": trained.step / train_seconds if train_seconds > 0 else None,
        "final_training_score_mean": recorder.series[-1][2] if recorder.series else None,
        "eval_seconds": eval_seconds,
        "evaluation": evaluation,
        "model": str(kept) if kept is not None else None,
    }


# ---------------------------------------------------------------------------------------------
# The section, in the suite's process


def run_games(args, run_in_fresh_process, say) -> dict[str, Any]:
    """Every game config on every seed; the results dict ({"configs": {name: entry}})."""
    names = [name.strip() for name in (args.game_configs or "").split(",") if name.strip()]
    episodes = args.game_episodes or (QUICK_EPISODES if args.quick else 100)
    steps = args.game_steps or (QUICK_STEPS if args.quick else None)
    out: dict[str, Any] = {
        "episodes": episodes,
        "seeds": args.seeds,
        "steps_override": steps,
        "flappy_eval_pipes": FLAPPY_EVAL_PIPES,
        "configs": {},
    }
    try:
        configs = game_configs(args.configs, names or None)
    except (OSError, ValueError) as error:
        out["error"] = f"{type(error).__name__}: {error}"
        say(f"[games] FAILED: {out['error']}")
        return out
    say("[games] configs: " + ", ".join(f"{path.name} ({env})" for path, env in configs))
    for path, env_name in configs:
        out["configs"][path.name] = {"env_name": env_name, "runs": [None] * args.seeds}
    jobs = [(path, seed) for path, _ in configs for seed in range(args.seeds)]
    recording = threading.Lock()  # one run's result at a time into `out` and the partial file

    def one_run(job: tuple[Path, int]) -> None:
        path, seed = job
        params = {
            "config_path": str(path),
            "seed": seed,
            "episodes": episodes,
            "total_timesteps": steps,
            "device": args.device,
            "keep_models": str(args.keep_models) if getattr(args, "keep_models", None) else None,
        }
        result = run_in_fresh_process("ours_shipped_game", params, args.threads, 24 * 3600.0)
        with recording:
            out["configs"][path.name]["runs"][seed] = result
            say(f"[games] {path.name} seed {seed}: {seed_text(result)}")
            if getattr(args, "out", None) is not None:  # what is done so far survives an interrupted suite
                from trainer.run.files import atomic_write

                args.out.mkdir(parents=True, exist_ok=True)
                atomic_write(args.out / "games.partial.json", json.dumps(out, indent=1))

    # --game-parallel N: N runs at a time (each its own process and threads; for many-core machines).
    with ThreadPoolExecutor(max_workers=max(1, args.game_parallel or 1)) as pool:
        list(pool.map(one_run, jobs))
    return out


def seed_text(result: dict) -> str:
    from benchmarks.report import failed_text

    if "error" in result:
        return failed_text(result)
    played = result["evaluation"]
    text = (
        f"{result['steps']:,} steps in {result['train_seconds']:.0f} s; greedy score "
        f"{played['score_mean']:.1f} (worst {played['score_min']:.0f}) over {played['episodes']} games"
    )
    if played.get("wins") is not None:
        text += f", {played['wins']} won"
    if played.get("capped") is not None:
        text += f", {played['capped']} reached the cap"
    return text


# ---------------------------------------------------------------------------------------------
# The table

HEADERS = (
    "Game",
    "Config",
    "Steps trained",
    "Seeds",
    "Training time (median)",
    "Greedy score: mean / min over seeds",
    "Worst game",
    "Won",
    "Reached the cap",
)
GAME_LABELS = {"snake": "Snake", "flappy_bird": "Flappy Bird"}


def _share(count: int, total: int) -> str:
    return f"{count / total:.0%} ({count}/{total})" if total else "n/a"


def config_row(name: str, entry: dict[str, Any]) -> tuple[str, ...]:
    runs = entry["runs"]
    ok = [run for run in runs if "error" not in run]
    game = GAME_LABELS.get(entry["env_name"], entry["env_name"])
    if not ok:
        error = next((run["error"] for run in runs), "no seeds run")
        return (game, name, "", str(len(runs)), "FAILED: " + error.splitlines()[-1][:80], "", "", "", "")
    seeds = f"{len(ok)}" + (f" ({len(runs) - len(ok)} failed)" if len(ok) < len(runs) else "")
    means = [run["evaluation"]["score_mean"] for run in ok]
    games = sum(run["evaluation"]["episodes"] for run in ok)
    wins = [run["evaluation"].get("wins") for run in ok]
    capped = [run["evaluation"].get("capped") for run in ok]
    cap_steps = ok[0]["evaluation"].get("cap_steps")
    cap_text = "n/a"
    if None not in capped:
        cap_text = _share(sum(capped), games)
        if entry["env_name"] == "flappy_bird":
            cap_text += f" of {FLAPPY_EVAL_PIPES:,} pipes"
        elif cap_steps:
            cap_text += f" of {cap_steps:,} steps"
    steps = f"{ok[0]['steps']:,}"
    shipped = ok[0].get("shipped_budget")
    if shipped and shipped != ok[0]["budget"]:
        steps += f" (budget {shipped:,})"
    return (
        game,
        name,
        steps,
        seeds,
        f"{statistics.median(run['train_seconds'] for run in ok):.0f} s",
        f"{statistics.fmean(means):.1f} / {min(means):.1f}",
        f"{min(run['evaluation']['score_min'] for run in ok):.0f}",
        "n/a" if None in wins else _share(sum(wins), games),
        cap_text,
    )


def rows(section: dict[str, Any]) -> list[tuple[str, ...]]:
    return [config_row(name, entry) for name, entry in section.get("configs", {}).items()]


def render_markdown(section: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows(section)]
    return "\n".join(lines) + "\n"


def render_console(section: dict[str, Any]) -> str:
    from benchmarks.report import console_table

    return console_table(HEADERS, rows(section))


def write_section_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """games.json and games.md beside the suite's results.md (which other sections rewrite)."""
    from benchmarks.report import measured_line, write_section_json
    from trainer.run.files import atomic_write

    section = results["games"]
    json_path, md_path = write_section_json(results, "games", out_dir), out_dir / "games.md"
    header = [
        "# What each shipped game config reaches",
        "",
        measured_line(results),
        "",
        f"Each seed trains in a fresh process for the budget, then its final model plays {section['episodes']} "
        f"greedy games on held-out env seeds ({EVAL_SEED_OFFSET} + the training seed); Flappy Bird's cap is "
        f"raised to {FLAPPY_EVAL_PIPES:,} pipes. Won: Snake games that filled the board.",
        "",
    ]
    atomic_write(md_path, "\n".join(header) + "\n" + render_markdown(section))
    (out_dir / "games.partial.json").unlink(missing_ok=True)  # the whole run is in games.json now
    return [json_path, md_path]
