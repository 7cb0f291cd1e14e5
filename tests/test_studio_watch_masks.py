"""Watch on a game with action masks (Snake with `action_mode: absolute`, where reversing into the
snake's own neck is forbidden): the player hands the game's mask to the policy, so a policy that
wants the forbidden move most of all still never plays it."""

import pytest
import torch

from studio.watch import LivePlayer
from trainer.config.validation import config_from_dict
from trainer.run.layout import create_run_dir
from trainer.run.loop import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SNAKE = {
    "env_name": "snake",
    "env_kwargs": {"action_mode": "absolute", "grid_size": 8},
    "norm_obs": False,
    "model_type": "ppo-small",
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 64,
    "total_timesteps": 8 * 16 * 2,
    "gif_interval": 0,
    "device": "cpu",
    "seed": 3,
}
HEADING = slice(6, 10)  # Snake's vector observation: heading one-hot (up, right, down, left), envs/snake.py
STEPS = 200


def make_it_want_to_reverse(policy) -> None:
    """Rewire the actor so that its favourite, by far, is the move back into the snake's neck:
    heading h (one-hot at obs[6 + h]) -> action (h + 2) % 4."""
    first, middle, last = policy.actor[0], policy.actor[2], policy.actor[4]
    with torch.no_grad():
        for layer in (first, middle, last):
            layer.weight.zero_()
            layer.bias.zero_()
        for heading in range(4):
            first.weight[heading, HEADING.start + heading] = 3.0  # hidden unit h: ~1 while heading h
            middle.weight[heading, heading] = 3.0
            last.weight[(heading + 2) % 4, heading] = 20.0


def test_watch_on_snake_never_plays_the_masked_move(tmp_path):
    config = config_from_dict(SNAKE)
    run_dir = create_run_dir(config, tmp_path)
    train(config, run_dir)
    player = LivePlayer(run_dir)
    make_it_want_to_reverse(player.model.policy)

    # Without the mask this policy reverses every time: the mask is what the test can see at work.
    reverse = (player.env.heading + 2) % 4
    assert player.model.predict(player.obs, deterministic=True)[0].tolist() == reverse.tolist()

    played: list[tuple[int, int]] = []  # (heading before the step, action the player chose)
    step = player.env.step

    def recording_step(actions):
        played.append((int(player.env.heading[0]), int(actions[0])))
        return step(actions)

    player.env.step = recording_step
    frames = [player.step() for _ in range(STEPS)]
    player.close()

    assert len(played) == STEPS and frames[-1].jpeg[:2] == b"\xff\xd8"
    reversals = [(heading, action) for heading, action in played if action == (heading + 2) % 4]
    assert not reversals, f"Watch played the masked move (into the neck) {len(reversals)} times of {STEPS}"
    # It really played: the snake turned (more than one heading seen), it did not stand still.
    assert len({heading for heading, _ in played}) > 1
