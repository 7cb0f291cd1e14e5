"""Rollout GIFs: one episode of the current policy on a separate single env, rendered,
capped in length (and played on past the cap to learn how it ended), written atomically; when
the training loop records one (`GifSchedule`). Their caption: trainer/run/events.py `clip_caption`.

The GIF env lives on the CPU with its own seed and a CPU copy of the policy, so recording a GIF
never touches the training envs, the training device or the training random numbers: a run
with GIFs learns exactly what it learns without them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.nets.build import build_policy
from trainer.run.events import clip_caption
from trainer.run.files import atomic_write

MAX_GIF_WIDTH = 320  # wider frames are downsampled by an integer factor (smaller, faster files)
MAX_GIF_FPS = 30  # envs that render faster (CartPole: 50) have frames skipped: rendering is the cost


def frame_skip(env) -> int:
    """Render every n-th step so the GIF plays at real speed with at most MAX_GIF_FPS frames/s."""
    fps = int(getattr(env, "metadata", {}).get("render_fps", 30) or 30)
    return max(1, -(-fps // MAX_GIF_FPS))


def gif_fps(env) -> float:
    fps = int(getattr(env, "metadata", {}).get("render_fps", 30) or 30)
    return fps / frame_skip(env)


PLAY_ON_SECONDS = 2.0  # the most one GIF spends playing on past its last frame, to learn how the episode ends


@dataclass
class GifResult:
    path: Path
    episode_return: float  # of the whole episode when it ended, else so far
    episode_score: float | None
    frames: int
    seconds: float
    steps_shown: int = 0  # env steps the frames cover (== episode_steps: the whole episode)
    episode_steps: int = 0  # steps played: the whole episode when it ended, else as far as it got
    episode_ended: bool = False  # False: still running when the frames and the time to play on ran out
    drawing_seconds: float = 0.0  # of `seconds`: playing the drawn steps, drawing and writing the GIF
    steps_played_on: int = 0  # steps played past the last frame (without drawing)
    score_unit: str | None = None  # the game's (VecEnv.score_unit); None: the score is the return

    @property
    def caption(self) -> str:
        score = self.episode_score if self.score_unit else None
        return clip_caption(
            self.steps_shown, self.episode_steps, self.episode_ended, self.episode_return, score, self.score_unit
        )

    def event_fields(self) -> dict:
        """The `gif` event's fields (trainer/run/events.py EVENT_SCHEMA)."""
        return {
            "path": str(self.path),
            "episode_return": self.episode_return,
            "episode_score": self.episode_score,
            "frames": self.frames,
            "seconds": self.seconds,
            "steps_shown": self.steps_shown,
            "episode_steps": self.episode_steps,
            "episode_ended": self.episode_ended,
        }


class GifRecorder:
    def __init__(self, make_env, policy_spec: dict, max_frames: int):
        self._make_env = make_env  # () -> VecEnv with num_envs=1 on the CPU
        self._env = None
        self.policy = build_policy(policy_spec)
        self.policy.eval()
        self.max_frames = max_frames

    @torch.no_grad()
    def record(
        self,
        policy_state: dict,
        path: Path,
        seed: int,
        play_on_seconds: float = PLAY_ON_SECONDS,
        max_frames: int | None = None,
    ) -> GifResult:
        """Play one episode with the most likely actions, drawing its first `max_frames` frames
        (default: the recorder's); past them keep playing without drawing (cheap) for up to
        `play_on_seconds`, so the caption can say how the episode really ended."""
        started = time.perf_counter()
        max_frames = min(self.max_frames, max_frames or self.max_frames)
        if self._env is None:
            self._env = self._make_env()
        env = self._env
        self.policy.load_state_dict(policy_state)
        obs = env.reset(seed=seed)
        env.stats.drain()
        skip = frame_skip(env)
        frames = [env.render(0)]
        episode_return = 0.0
        ended = False
        step = played_on_from = 0
        state = None  # a recurrent policy's state (trainer/nets/playing.py `play`)
        playing_on_since = None  # perf_counter when the frames ran out and playing on began
        while True:
            if playing_on_since is None and len(frames) >= max_frames:
                playing_on_since, played_on_from = time.perf_counter(), step
            if playing_on_since is not None and time.perf_counter() - playing_on_since >= play_on_seconds:
                break
            mask = env.action_masks()  # None unless the env forbids some actions
            # one episode from its start: a recurrent policy's state (None at first) carries its history
            action, state = self.policy.play(self.policy.normalize_obs(obs), state, None, True, action_mask=mask)
            obs, reward, terminated, truncated, info = env.step(self.policy.env_action(action))
            episode_return += float(reward[0])
            step += 1
            if bool(terminated[0] | truncated[0]):
                ended = True
                break
            if playing_on_since is None and step % skip == 0:
                frames.append(env.render(0))
        played_on_seconds = 0.0 if playing_on_since is None else time.perf_counter() - playing_on_since
        # Each frame stands for the `skip` steps played from the state it shows (the first: the
        # reset state); an episode that ended while it was being drawn is in the GIF whole.
        steps_shown = step if playing_on_since is None else min(step, len(frames) * skip)
        summary = env.stats.drain()
        if ended and summary.count:
            score = summary.score_mean
        else:
            running = getattr(env.stats, "running_score", None)
            score = float(running[0]) if running is not None else None
        write_gif(frames, path, fps=gif_fps(env))
        seconds = time.perf_counter() - started
        return GifResult(
            Path(path),
            episode_return,
            score,
            len(frames),
            seconds,
            steps_shown,
            step,
            ended,
            drawing_seconds=seconds - played_on_seconds,
            steps_played_on=step - played_on_from if playing_on_since is not None else 0,
            score_unit=getattr(env, "score_unit", None),
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


GIF_SECONDS_PER_FRAME_ESTIMATE = 0.005  # until the first GIF has measured the cost of a frame
MIN_GIF_FRAMES = 30  # the shortest the budget cuts a GIF to (a second of CartPole or Flappy Bird)


class GifSchedule:
    """When the training loop records a rollout GIF, and how long it may be; the one rule:

    - the first right after the first update of a session, whole (up to `max_frames`: it is
      short, an untrained agent's episode), so the page shows the agent within seconds of Start;
    - then one every `interval` seconds of wall-clock time (start to start), never later: the
      picture the page shows is at most about `interval` seconds of training older than its
      status line. The budget shortens a GIF instead of delaying it: it draws as many frames as
      keep all GIF time so far within `time_fraction` of the training time (at least
      MIN_GIF_FRAMES, at most `max_frames`), and plays on past its last frame (to learn how the
      episode ends, at most PLAY_ON_SECONDS) only as long as the budget has left after that;
    - and one at the end of the run (the loop's, after training: it slows nothing), whole.

    A frame's cost is the last GIF's measured cost per drawn frame (playing, drawing, writing).
    """

    def __init__(self, interval: float, max_frames: int, time_fraction: float, seconds_spent: float = 0.0):
        self.interval = interval
        self.max_frames = max_frames
        self.time_fraction = time_fraction
        self.seconds_spent = seconds_spent  # saved in checkpoints: a resumed run keeps its budget
        self.seconds_per_frame = GIF_SECONDS_PER_FRAME_ESTIMATE
        self.last_started: float | None = None  # perf_counter of this session's last GIF

    @property
    def unbudgeted(self) -> bool:
        return self.time_fraction >= 1.0

    def due(self, now: float) -> bool:
        if not self.interval:
            return False
        return self.last_started is None or now - self.last_started >= self.interval

    def _budget_left(self, training_seconds: float) -> float:
        return self.time_fraction * training_seconds - self.seconds_spent

    def frames(self, training_seconds: float | None) -> int:
        """How many frames the GIF due now may draw (None: after training, whole)."""
        if training_seconds is None or self.unbudgeted or self.last_started is None:
            return self.max_frames
        affordable = int(self._budget_left(training_seconds) / max(self.seconds_per_frame, 1e-9))
        return max(min(MIN_GIF_FRAMES, self.max_frames), min(self.max_frames, affordable))

    def play_on_seconds(self, training_seconds: float | None, episode_length: float | None, frames: int) -> float:
        """How long the GIF due now (of `frames` frames) may play on past its last frame: what the
        budget has left after drawing it, at most PLAY_ON_SECONDS (None: after training)."""
        if training_seconds is None or self.unbudgeted:
            return PLAY_ON_SECONDS
        drawing = self.seconds_per_frame * min(frames, episode_length or frames)
        return min(PLAY_ON_SECONDS, max(0.0, self._budget_left(training_seconds) - drawing))

    def started(self, now: float) -> None:
        self.last_started = now

    def spent(self, result: GifResult) -> None:
        self.seconds_spent += result.seconds
        self.seconds_per_frame = result.drawing_seconds / max(1, result.frames)


def write_gif(frames: list[np.ndarray], path: str | Path, fps: float = 30) -> Path:
    """Frames (H x W x 3 uint8) -> an animated GIF that loops, written atomically."""
    from PIL import Image

    factor = max(1, -(-frames[0].shape[1] // MAX_GIF_WIDTH))
    # One shared palette (from a few frames spread over the episode) is much faster than
    # quantising every frame on its own.
    small = [np.ascontiguousarray(frame[::factor, ::factor]) for frame in frames]
    images = [Image.fromarray(frame) for frame in small]
    samples = np.concatenate([small[i] for i in np.linspace(0, len(small) - 1, min(4, len(small))).astype(int)])
    palette_source = Image.fromarray(samples).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    quantised = [image.quantize(palette=palette_source, dither=Image.Dither.NONE) for image in images]
    return atomic_write(
        path,
        lambda file: quantised[0].save(
            file,
            format="GIF",
            save_all=True,
            append_images=quantised[1:],
            duration=max(20, round(1000 / max(1, fps))),
            loop=0,
            optimize=False,
        ),
    )
