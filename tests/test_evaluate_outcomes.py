"""Evaluation counts what a game player asks first: how many games were won (Snake: the board
filled) and how many lasted the env's step cap (Flappy Bird's max_steps), in `python -m trainer
evaluate`'s summary, in the result's JSON and on the studio's Evaluate tab."""

from __future__ import annotations

import json

import pytest
import torch

from envs import make_vec_env
from trainer.config.validation import config_from_dict
from trainer.serving.evaluate import EvaluationResult, count_outcomes, evaluate

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3  # Snake's absolute actions
MOVES = {(-1, 0): UP, (0, 1): RIGHT, (1, 0): DOWN, (0, -1): LEFT}


def _hamiltonian_cycle(size: int) -> list[tuple[int, int]]:
    """Every cell of an even size x size board once, each next to the one before, the last next
    to the first: row 0 to the right, then snaking down columns 1.., and back up column 0."""
    cells = [(0, column) for column in range(size)]
    for row in range(1, size):
        columns = range(size - 1, 0, -1) if row % 2 else range(1, size)
        cells += [(row, column) for column in columns]
    return cells + [(row, 0) for row in range(size - 1, 0, -1)]


def test_a_snake_that_fills_the_board_wins_and_evaluation_counts_it():
    env = make_vec_env("snake", 1, seed=0, grid_size=6, action_mode="absolute")
    env.reset(seed=0)
    cycle = _hamiltonian_cycle(6)
    position = cycle.index((env.head_row.item(), env.head_column.item()))
    first = cycle[(position + 1) % len(cycle)]
    env.heading.fill_(MOVES[(first[0] - cycle[position][0], first[1] - cycle[position][1])])
    for _ in range(100 * len(cycle)):  # following the cycle, it eats every food and never hits itself
        here, there = cycle[position], cycle[(position + 1) % len(cycle)]
        _, reward, terminated, truncated, _ = env.step(torch.tensor([MOVES[(there[0] - here[0], there[1] - here[1])]]))
        position = (position + 1) % len(cycle)
        if terminated.any() or truncated.any():
            break
    assert terminated.item() and reward.item() > 0, "the game ended on eating the last food, not on a crash"
    _, _, final_score = env.stats.finished.numpy()
    assert final_score[0] == env.winning_score == 6 * 6 - (env.length.item())  # a new game started at length 3

    crashed = EvaluationResult(returns=[0.0, 0.0], scores=[float(final_score[0]), 5.0], lengths=[500, 40])
    count_outcomes(crashed, env)
    assert (crashed.wins, crashed.capped) == (1, None)  # Snake has no step cap: hunger is no finish line
    assert "wins:     1 of 2 (board filled)" in crashed.summary() and "cap:" not in crashed.summary()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """A barely trained model of each game (a few updates: the point is the counting)."""
    from trainer.run.loop import train

    torch.set_num_threads(1)
    models = {}
    for game in ("flappy_bird", "snake"):
        config = config_from_dict(
            {
                "env_name": game,
                "num_envs": 8,
                "num_steps": 16,
                "mini_batch_size": 64,
                "total_timesteps": 256,
                "gif_interval": 0,
                "seed": 2,
                "device": "cpu",
            }
        )
        models[game] = train(config, tmp_path_factory.mktemp(game) / "run").final_model
    return models


def test_flappy_games_that_last_the_cap_are_counted_and_the_cap_is_an_env_option(tiny_models):
    # Five steps: every bird is still in the air (it starts halfway up, the first pipe far away).
    short = evaluate(tiny_models["flappy_bird"], episodes=4, env_kwargs={"max_steps": 5})
    assert (short.capped, short.cap_steps, short.wins) == (4, 5, None)
    assert "cap:      4 of 4 reached the cap of 5 steps" in short.summary() and "wins:" not in short.summary()
    assert json.loads(json.dumps(short.as_dict()))["capped"] == 4

    # The default cap (10,000 steps, about 277 pipes) is far beyond a barely trained bird.
    default = evaluate(tiny_models["flappy_bird"], episodes=4)
    assert default.capped == 0 and default.cap_steps == 10_000
    assert all(length < 10_000 for length in default.lengths)


def test_the_evaluate_command_takes_env_options_and_prints_json(tiny_models, capsys):
    from trainer.__main__ import main

    model = str(tiny_models["flappy_bird"])
    assert main(["evaluate", model, "-n", "3", "--env-option", "max_steps=5", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["capped"], printed["cap_steps"], printed["lengths"]) == (3, 5, [5, 5, 5])

    # A misspelt option is named with the env's own options; a flag without a value says how to write one.
    assert main(["evaluate", model, "--env-option", "max_step=5"]) == 2
    assert "does not take the option 'max_step'. Did you mean 'max_steps'?" in capsys.readouterr().err
    assert main(["evaluate", model, "--env-option", "max_steps"]) == 2
    assert "--env-option expects key=value (e.g. --env-option max_steps=36024)" in capsys.readouterr().err


def test_the_evaluate_tab_says_how_many_games_were_won_or_reached_the_cap(tiny_models, tmp_path):
    from studio.evaluate import EvaluationSummary, evaluate_checkpoint

    flappy = evaluate_checkpoint(tiny_models["flappy_bird"], episodes=3).markdown()
    assert "Reached the cap of 10,000 steps: **0 of 3** games." in flappy and "Wins" not in flappy
    snake = evaluate_checkpoint(tiny_models["snake"], episodes=3).markdown()
    assert "Wins (board filled): **0 of 3** games." in snake and "Reached the cap" not in snake

    won = EvaluationSummary("snake", 10_000, 100, True, 1.0, 0.0, 141.0, 0.0, 0, None, wins=97, win_text="board filled")
    assert "Wins (board filled): **97 of 100** games." in won.markdown()
    capped = EvaluationSummary(
        "flappy_bird", 10_000, 100, True, 1.0, 0.0, 1000.0, 0.0, 0, None, capped=100, cap_steps=36_024
    )
    assert "Reached the cap of 36,024 steps: **100 of 100** games." in capped.markdown()
    # A game with neither (a Gymnasium env without a cap attribute) gets no such line.
    plain = EvaluationSummary("Pendulum-v1", 10_000, 10, True, -150.0, 10.0, -150.0, 10.0, 0, None).markdown()
    assert "Wins" not in plain and "Reached the cap" not in plain


def test_a_model_trained_with_a_curriculum_is_judged_on_the_real_game(tmp_path):
    # Flappy Bird's hard_pipes only shapes training: evaluation, the Watch view and the games
    # benchmark play the original pipes, with the model's own observation.
    from benchmarks.games import evaluation_env_kwargs
    from trainer.run.checkpoint import load_model
    from trainer.run.loop import train
    from trainer.serving.evaluate import choose_env

    torch.set_num_threads(1)
    trained_with = {"obs": "lookahead", "hard_pipes": 1.0}
    config = config_from_dict(
        {"env_name": "flappy_bird", "env_kwargs": trained_with, "num_envs": 8, "num_steps": 16}
        | {"mini_batch_size": 64, "total_timesteps": 256, "gif_interval": 0, "device": "cpu"}
    )
    model = load_model(train(config, tmp_path / "run").final_model)
    assert choose_env(model).kwargs == {"obs": "lookahead"}
    played = evaluate(model, episodes=2)
    assert len(played.lengths) == 2  # it plays, with its 12-float observations
    assert choose_env(model, "flappy_bird").kwargs == {"obs": "lookahead"}
    assert choose_env(model, "flappy_bird", {"hard_pipes": 0.5}).kwargs == {"hard_pipes": 0.5}  # asked for: kept
    judged = evaluation_env_kwargs("flappy_bird", trained_with)
    assert "hard_pipes" not in judged and judged["obs"] == "lookahead" and judged["max_steps"] > 36_000
