"""Smoke test of the suite's games section (benchmarks/games.py): on minuscule budgets every
shipped game config trains, plays its greedy games on held-out seeds (Flappy Bird to 1,000
pipes) and lands in the table with its wins and games that reached the cap. It asserts what the
section produces, never a score."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import contender, games, run

TINY = """\
env_name: {env}
model_type: ppo-small
num_envs: 8
num_steps: 16
mini_batch_size: 64
update_epochs: 1
total_timesteps: 256
"""


def _in_this_process(kind: str, params: dict, threads: int, timeout: float) -> dict:
    """The suite's runner without the fresh process (the slow part)."""
    try:
        return contender.run_measurement(kind, params)
    except Exception as error:  # the real runner reports a failed contender the same way
        return {"error": f"{kind}: {type(error).__name__}: {error}"}


@pytest.fixture
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_games_section_trains_every_game_config_and_tables_wins_and_caps(
    tmp_path, monkeypatch, capsys, one_torch_thread
):
    configs, out = tmp_path / "configs", tmp_path / "results"
    configs.mkdir()
    for name, env in (("snake.yaml", "snake"), ("flappy_bird.yaml", "flappy_bird"), ("cartpole.yaml", "cartpole")):
        (configs / name).write_text(TINY.format(env=env))
    (configs / "guide.yaml").write_text(TINY.format(env="FlappyBirdPygame-v0"))  # an alias is a game too
    monkeypatch.setattr(run, "run_in_fresh_process", _in_this_process)

    argv = ["--only", "games", "--seeds", "2", "--game-episodes", "3", "--configs", str(configs), "--out", str(out)]
    assert run.main([*argv, "--keep-models", str(tmp_path / "models")]) == 0

    section = json.loads((out / "games.json").read_text())["games"]
    assert list(section["configs"]) == ["flappy_bird.yaml", "guide.yaml", "snake.yaml"]  # not CartPole
    for name, entry in section["configs"].items():
        assert [r.get("seed") for r in entry["runs"]] == [0, 1], entry["runs"][0].get("error")
        for result in entry["runs"]:
            assert result["steps"] >= result["budget"] == result["shipped_budget"] == 256  # the config's own budget
            assert result["eval_seed"] != result["seed"]  # held-out boards and pipes
            assert result["evaluation"]["episodes"] == 3
    flappy = section["configs"]["flappy_bird.yaml"]["runs"][0]
    assert flappy["eval_env_kwargs"]["max_steps"] == games.flappy_steps_for_pipes(games.FLAPPY_EVAL_PIPES)
    assert flappy["evaluation"]["capped"] is not None and flappy["evaluation"]["wins"] is None
    snake = section["configs"]["snake.yaml"]["runs"][0]
    assert snake["evaluation"]["wins"] is not None and snake["evaluation"]["capped"] is None
    # --keep-models: each measured model stays, and plays again.
    from trainer.run.checkpoint import load_model

    kept = sorted(path.name for path in (tmp_path / "models").iterdir())
    assert kept == [f"{stem}_seed{seed}.pth" for stem in ("flappy_bird", "guide", "snake") for seed in (0, 1)]
    assert snake["model"] == str(tmp_path / "models" / "snake_seed0.pth")
    assert load_model(snake["model"]).predict(torch.zeros(18))[0] in (0, 1, 2)

    printed = capsys.readouterr().out
    for text in (printed, (out / "games.md").read_text()):
        assert "Greedy score: mean / min over seeds" in text and "Reached the cap" in text
        assert "of 1,000 pipes" in text  # Flappy Bird's row
        snake_row = next(line for line in text.splitlines() if line.lstrip("| ").startswith("Snake"))
        assert "/6)" in snake_row and snake_row.rstrip(" |").endswith("n/a")  # won of 2 seeds x 3 games; no cap
    assert not (out / "results.md").exists()  # the section keeps to its own files
    assert not (out / "games.partial.json").exists()  # the whole run is in games.json

    (out / "games.md").unlink()  # --replot writes the table again from games.json alone
    assert run.main(["--only", "games", "--replot", "--out", str(out)]) == 0
    assert "| Snake | snake.yaml | " in (out / "games.md").read_text()


def test_quick_mode_cuts_the_budget_and_the_games(tmp_path):
    args = run.parse_args(["--only", "games", "--quick", "--configs", str(tmp_path)])
    assert args.seeds == 1
    seen = []
    games.run_games(args, lambda kind, params, *_: seen.append(params) or {"error": "not run"}, lambda _: None)
    assert seen == []  # no game configs in an empty folder: nothing runs
    (tmp_path / "snake.yaml").write_text(TINY.format(env="snake"))
    section = games.run_games(args, lambda kind, params, *_: seen.append(params) or {"error": "not run"}, print)
    assert [params["total_timesteps"] for params in seen] == [games.QUICK_STEPS]
    assert [params["episodes"] for params in seen] == [games.QUICK_EPISODES]
    assert "FAILED: not run" in games.render_console(section)


def test_runs_side_by_side_keep_their_seed_order(tmp_path):
    """--game-parallel: runs finish in any order; each lands under its config and seed."""
    import time

    for name in ("snake.yaml", "flappy_bird.yaml"):
        (tmp_path / name).write_text(TINY.format(env=name.removesuffix(".yaml")))
    args = run.parse_args(["--only", "games", "--seeds", "3", "--game-parallel", "4", "--configs", str(tmp_path)])
    args.out = tmp_path / "results"

    def later_seeds_first(kind, params, *_):
        time.sleep(0.05 * (3 - params["seed"]))
        return {"error": f"{params['config_path']} seed {params['seed']}"}

    section = games.run_games(args, later_seeds_first, lambda _: None)
    for name, entry in section["configs"].items():
        assert [run["error"] for run in entry["runs"]] == [f"{tmp_path / name} seed {seed}" for seed in range(3)]
    assert json.loads((args.out / "games.partial.json").read_text())["configs"] == section["configs"]


def test_the_flappy_cap_is_the_steps_a_perfect_bird_needs_for_its_pipes():
    """A scripted bird that keeps to the middle of each gap (a wide one, so it never crashes)
    passes pipe N on exactly the step `flappy_steps_for_pipes(N)` says."""
    from envs import flappy_bird as flappy
    from envs import make_vec_env

    kwargs = {"gap_size": flappy.GROUND_Y * 0.6 - 1}
    env = make_vec_env("flappy_bird", 1, seed=3, **kwargs)
    env.reset(seed=3)
    slots = torch.arange(env.num_pipes) * env.pipe_spacing
    passed_on = {}
    for step in range(1, games.flappy_steps_for_pipes(4, kwargs) + 1):
        ahead = (env.pipe_offset + slots + flappy.PIPE_WIDTH > flappy.BIRD_X).nonzero()[0].item()
        middle = env.gap_tops[0, ahead] + env.gap_size / 2
        flap = bool(env.bird_y[0] > middle) and bool(env.bird_velocity[0] >= 0)
        _, _, terminated, _, _ = env.step(torch.tensor([int(flap)]))
        assert not terminated.any(), f"the scripted bird crashed on step {step}"
        passed_on.setdefault(int(env.score[0].item()), step)
    assert [passed_on.get(pipes) for pipes in (1, 2, 3, 4)] == [
        games.flappy_steps_for_pipes(pipes, kwargs) for pipes in (1, 2, 3, 4)
    ]
