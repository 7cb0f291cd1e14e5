"""Rollout GIFs: when the loop records one (GifSchedule), what the recorder plays and draws, and
the caption that says what a GIF shows of its episode (trainer/run/events.py clip_caption), shared
by the Train view, the log, `trainer evaluate --gif` and the Evaluate tab."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from envs import make_vec_env
from trainer.config.validation import config_from_dict
from trainer.run.events import clip_caption, format_event, make_event
from trainer.run.gif import MIN_GIF_FRAMES, PLAY_ON_SECONDS, GifRecorder, GifResult, GifSchedule
from trainer.run.setup import policy_spec

# -- the caption ---------------------------------------------------------------------------------


def test_the_caption_says_whether_the_gif_holds_the_whole_episode():
    assert (
        clip_caption(212, 212, True, 212.0, 212.0, "steps balanced")
        == "whole episode, 212 steps · 212 steps balanced · return 212.0"
    )
    # Cut by the frame limit, played on to the end: the episode's own length, score and return.
    assert (
        clip_caption(300, 2140, True, 1291.46, 31.0, "pipes") == "first 300 of 2,140 steps · 31 pipes · return 1,291.5"
    )
    # Still running when the time to play on ran out: what it had reached, said as such.
    assert (
        clip_caption(300, 5000, False, 1900.0, 140.0, "pipes")
        == "first 300 steps of an episode still running after 5,000 · 140 pipes so far · return 1,900.0 so far"
    )
    assert (
        clip_caption(300, 300, False, 90.0, 7.0, "pipes")
        == "first 300 steps of an episode still running · 7 pipes so far · return 90.0 so far"
    )
    # No unit known (the log line); a Gymnasium env, whose score is the return (said once);
    # an event written before these fields existed.
    assert clip_caption(50, 50, True, -0.1, 0.0) == "whole episode, 50 steps · score 0 · return -0.1"
    assert clip_caption(200, 200, True, -985.2, None) == "whole episode, 200 steps · return -985.2"
    assert clip_caption(None, None, None, 42.25, 3.0, "food") == "3 food · return 42.2"


def test_the_log_line_of_a_gif_uses_the_same_caption():
    event = make_event(
        "gif",
        step=8192,
        path="/r/rollouts/step_8192.gif",
        episode_return=1291.5,
        episode_score=31.0,
        frames=300,
        seconds=2.0,
        steps_shown=300,
        episode_steps=2140,
        episode_ended=True,
    )
    assert format_event(event) == (
        "Rollout GIF at step 8192 (300 frames): first 300 of 2,140 steps · "
        "score 31 · return 1,291.5: /r/rollouts/step_8192.gif"
    )


# -- the schedule --------------------------------------------------------------------------------


def result(seconds: float, frames: int, drawing_seconds: float | None = None, played_on: int = 0) -> GifResult:
    return GifResult(
        "x.gif",
        0.0,
        0.0,
        frames,
        seconds,
        frames,
        frames + played_on,
        True,
        drawing_seconds=seconds if drawing_seconds is None else drawing_seconds,
        steps_played_on=played_on,
    )


def test_the_first_gif_comes_right_after_the_first_update_whole():
    schedule = GifSchedule(interval=10, max_frames=300, time_fraction=0.1)
    assert schedule.due(now=100.0)
    assert schedule.frames(training_seconds=0.3) == 300  # an untrained agent's episode: short anyway
    # It is played on only as far as the budget has left (nothing, a third of a second in).
    assert schedule.play_on_seconds(training_seconds=0.3, episode_length=None, frames=300) == 0.0
    assert not GifSchedule(interval=0, max_frames=300, time_fraction=1.0).due(100.0)  # 0: never


def test_then_one_every_interval_seconds_never_later_the_budget_cuts_it_shorter():
    schedule = GifSchedule(interval=10, max_frames=300, time_fraction=0.1)
    schedule.started(100.0)
    schedule.spent(result(seconds=0.2, frames=40))  # 5 ms a frame
    assert not schedule.due(now=109.0)
    assert schedule.due(now=110.0)  # whatever the budget: the page's picture stays fresh
    # 10 s of training at 10% is 1 s of GIFs; 0.2 s spent leaves 0.8 s: 160 frames at 5 ms.
    assert schedule.frames(training_seconds=10.0) == 160
    assert schedule.frames(training_seconds=1000.0) == 300  # never more than max_frames
    assert schedule.frames(training_seconds=1.0) == MIN_GIF_FRAMES  # never fewer than the floor
    # time_fraction 1: no budget, whole GIFs.
    unbudgeted = GifSchedule(interval=10, max_frames=300, time_fraction=1.0)
    unbudgeted.started(100.0)
    assert unbudgeted.frames(0.1) == 300
    assert unbudgeted.play_on_seconds(0.1, 10_000, 300) == PLAY_ON_SECONDS


def test_playing_on_gets_what_the_budget_has_left_after_drawing():
    schedule = GifSchedule(interval=1, max_frames=300, time_fraction=0.05)
    schedule.started(0.0)
    schedule.spent(result(seconds=2.5, frames=300, drawing_seconds=1.5, played_on=1000))  # 5 ms a frame
    assert schedule.seconds_per_frame == pytest.approx(0.005)
    # 100 s of training at 5%: 5 s; 2.5 s spent, 300 frames to draw (1.5 s): 1 s left to play on.
    assert schedule.play_on_seconds(training_seconds=100.0, episode_length=1300, frames=300) == pytest.approx(1.0)
    # A GIF cut to 100 frames leaves more: at most PLAY_ON_SECONDS.
    assert schedule.play_on_seconds(training_seconds=100.0, episode_length=1300, frames=100) == PLAY_ON_SECONDS
    assert schedule.play_on_seconds(training_seconds=None, episode_length=1300, frames=300) == PLAY_ON_SECONDS


def test_the_recorder_draws_no_more_than_it_is_given(tmp_path, cartpole_recorder):
    recorder, weights = cartpole_recorder
    gif = recorder(300).record(weights, tmp_path / "short.gif", seed=0, play_on_seconds=0.0, max_frames=3)
    # The GIF may hold fewer: Pillow merges a frame identical to the one before (a cart that did not move).
    assert gif.frames == 3 and 1 <= Image.open(gif.path).n_frames <= 3


# -- the recorder on a real game -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole_recorder():
    """An untrained CartPole policy (episodes of a few dozen steps); CartPole draws every 2nd step."""
    config = config_from_dict({"env_name": "cartpole", "num_envs": 1, "num_steps": 8, "device": "cpu"})
    env = make_vec_env("cartpole", 1, device="cpu", seed=0)
    spec = policy_spec(config, env)
    env.close()

    def recorder(max_frames: int) -> GifRecorder:
        return GifRecorder(lambda: make_vec_env("cartpole", 1, device="cpu", seed=1), spec, max_frames)

    from trainer.nets.build import build_policy

    torch.manual_seed(0)  # the same untrained policy in every process the tests run in
    return recorder, build_policy(spec).state_dict()


def test_a_short_episode_is_in_the_gif_whole(tmp_path, cartpole_recorder):
    make, weights = cartpole_recorder
    recorder = make(max_frames=1000)
    gif = recorder.record(weights, tmp_path / "whole.gif", seed=3)
    recorder.close()
    assert gif.episode_ended and gif.steps_shown == gif.episode_steps and gif.caption.startswith("whole episode, ")
    assert gif.episode_score == gif.episode_steps  # CartPole's score: steps balanced
    with Image.open(gif.path) as image:
        assert image.format == "GIF" and image.size[0] <= 320


def test_a_cut_episode_is_played_on_to_its_end_and_the_caption_says_so(tmp_path, cartpole_recorder):
    make, weights = cartpole_recorder
    recorder = make(max_frames=4)
    whole = make(max_frames=1000).record(weights, tmp_path / "whole.gif", seed=3)
    cut = recorder.record(weights, tmp_path / "cut.gif", seed=3)
    assert cut.frames == 4 and cut.steps_shown == 8  # each frame stands for 2 steps
    # The same episode (same seed, most likely actions): the caption gives its real length.
    assert cut.episode_ended and cut.episode_steps == whole.episode_steps > cut.steps_shown
    assert cut.episode_return == whole.episode_return and cut.steps_played_on > 0
    assert cut.caption.startswith(f"first 8 of {whole.episode_steps} steps")
    # No time to play on: the caption says the episode was still running, and what it had reached.
    running = recorder.record(weights, tmp_path / "running.gif", seed=3, play_on_seconds=0.0)
    recorder.close()
    # It stops at the 4th frame, taken after 6 steps: 6 steps played, all of them shown.
    assert not running.episode_ended and running.episode_steps == running.steps_shown == 6
    assert running.caption == (
        "first 6 steps of an episode still running · 6 steps balanced so far · return 6.0 so far"
    )


def test_evaluate_gifs_are_captioned_the_same_way(tmp_path):
    """`trainer evaluate --gif` and the Evaluate tab: the GIF of the first episode, cut at its
    frame limit, says so with the episode's real length (played to the end anyway)."""
    from studio.evaluate import evaluate_checkpoint
    from trainer.run.loop import train
    from trainer.serving.evaluate import evaluate

    config = config_from_dict(
        {
            "env_name": "cartpole",
            "num_envs": 8,
            "num_steps": 16,
            "mini_batch_size": 64,
            "total_timesteps": 256,
            "gif_interval": 0,
            "seed": 2,
            "device": "cpu",
        }
    )
    model = train(config, tmp_path / "run").final_model
    whole = evaluate(model, episodes=2, num_envs=1, gif_path=tmp_path / "whole.gif", gif_max_frames=10_000)
    assert whole.gif_caption == (
        f"whole episode, {whole.lengths[0]} steps · {whole.scores[0]:.0f} steps balanced · "
        f"return {whole.returns[0]:.1f}"
    )
    cut = evaluate(model, episodes=2, num_envs=1, gif_path=tmp_path / "cut.gif", gif_max_frames=3)
    assert cut.gif_caption == whole.gif_caption.replace("whole episode,", "first 6 of")
    assert f"({cut.gif_caption})" in cut.summary()
    summary = evaluate_checkpoint(model, episodes=2, gif_path=tmp_path / "tab.gif", gif_max_frames=3)
    assert summary.gif_path and "The GIF, the first episode: first 6 of " in summary.markdown()
