"""The Watch tab's player without a browser: it plays the run's newest model, switches to a newer
checkpoint as it lands, says clearly when a run has nothing to watch, and its stream ends when
the viewer goes away."""

import os
import threading
import time

import pytest

from studio.watch import LivePlayer, WatchError, frame_html, stream_frames
from trainer.config.validation import config_from_dict
from trainer.run.checkpoint import atomic_save, read_checkpoint
from trainer.run.layout import create_run_dir, write_config
from trainer.run.loop import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {
    "env_name": "cartpole",
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 64,
    "total_timesteps": 8 * 16 * 2,
    "gif_interval": 0,
    "device": "cpu",
    "seed": 2,
}


def test_the_player_shows_frames_and_the_score_of_the_newest_model(tmp_path):
    run_dir = create_run_dir(config_from_dict(TINY), tmp_path)
    first = train(config_from_dict(TINY), run_dir).final_model
    player = LivePlayer(run_dir)
    frames = [player.step() for _ in range(30)]
    assert frames[0].jpeg[:2] == b"\xff\xd8"  # JPEG
    assert len({frame.jpeg for frame in frames}) > 10, "the game should move from frame to frame"
    assert frames[0].model_step == 256 and frames[0].fps == 50  # CartPole's render_fps
    html = frame_html(frames[-1])
    assert 'id="watch-frame"' in html and "Score <b" in html and first.name in html

    # A newer model file (here the final model written again, later) is picked up.
    stamp = time.time() + 5
    os.utime(first, (stamp, stamp))
    player.last_reload_check = 0.0
    player.step()
    assert player.model_mtime == pytest.approx(stamp)
    player.close()


def test_a_run_without_a_model_or_with_a_custom_env_says_why(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    write_config(empty, config_from_dict(TINY))
    with pytest.raises(WatchError, match="has no model yet"):
        LivePlayer(empty)
    # A model whose config names code (`module:Class`): a file is data, so it is not imported.
    trained = train(config_from_dict(TINY), tmp_path / "run").final_model
    payload = read_checkpoint(trained)
    payload["config"]["env_name"] = "evil_module:Env"
    custom = tmp_path / "custom"
    custom.mkdir()
    atomic_save(payload, custom / "evil_ppo_final.pth")
    with pytest.raises(WatchError, match="cannot be loaded here.*--allow-custom-envs"):
        LivePlayer(custom)


def test_the_stream_is_paced_and_ends_when_closed(tmp_path):
    run_dir = create_run_dir(config_from_dict(TINY), tmp_path)
    train(config_from_dict(TINY), run_dir)
    stream = stream_frames(LivePlayer(run_dir))
    next(stream)
    started = time.monotonic()
    count = sum(1 for _, _ in zip(range(10), stream))
    assert count == 10
    assert time.monotonic() - started >= 9 / 50 * 0.9  # not faster than the game's 50 fps
    stream.close()  # what Gradio does when the tab closes: the player thread ends
    assert not any(thread.name == "watch-player" and thread.is_alive() for thread in threading.enumerate())


def test_watch_pressed_before_the_first_checkpoint_starts_playing_once_one_lands():
    from studio.watch import NoModelYet
    from studio.watch_stream import wait_for_player

    def attempts(outcomes):
        outcomes = iter(outcomes)

        def make_player():
            outcome = next(outcomes)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        return make_player

    no_model = NoModelYet("Run r has no model yet.")
    shown = list(wait_for_player(attempts([no_model, no_model, "the player"]), lambda: True, NoModelYet, pause=0))
    assert shown == ["Run r has no model yet. Waiting for it…", "the player"]  # said once, then it plays
    with pytest.raises(NoModelYet):  # the run ended without a model: nothing to wait for
        list(wait_for_player(attempts([no_model]), lambda: False, NoModelYet, pause=0))
