"""Rollout GIFs: one episode of the current policy on a separate single env, rendered,
capped in length, written atomically.

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

from trainer.models import build_policy
from trainer.run_dir import atomic_write

MAX_GIF_WIDTH = 320  # wider frames are downsampled by an integer factor (smaller, faster files)
MAX_GIF_FPS = 30     # envs that render faster (CartPole: 50) have frames skipped: rendering is the cost


def frame_skip(env) -> int:
    """Render every n-th step so the GIF plays at real speed with at most MAX_GIF_FPS frames/s."""
    fps = int(getattr(env, "metadata", {}).get("render_fps", 30) or 30)
    return max(1, -(-fps // MAX_GIF_FPS))


def gif_fps(env) -> float:
    fps = int(getattr(env, "metadata", {}).get("render_fps", 30) or 30)
    return fps / frame_skip(env)


@dataclass
class GifResult:
    path: Path
    episode_return: float
    episode_score: float | None
    frames: int
    seconds: float


class GifRecorder:
    def __init__(self, make_env, policy_spec: dict, max_frames: int):
        self._make_env = make_env          # () -> VecEnv with num_envs=1 on the CPU
        self._env = None
        self.policy = build_policy(policy_spec)
        self.policy.eval()
        self.max_frames = max_frames

    @torch.no_grad()
    def record(self, policy_state: dict, path: Path, seed: int) -> GifResult:
        started = time.perf_counter()
        if self._env is None:
            self._env = self._make_env()
        env = self._env
        self.policy.load_state_dict(policy_state)
        obs = env.reset(seed=seed)
        env.stats.drain()
        skip = frame_skip(env)
        frames = [env.render(0)]
        episode_return = 0.0
        finished = False
        step = 0
        while len(frames) < self.max_frames:
            action, _, _ = self.policy.act(self.policy.normalize_obs(obs), deterministic=True)
            obs, reward, terminated, truncated, info = env.step(self.policy.env_action(action))
            episode_return += float(reward[0])
            step += 1
            if bool(terminated[0] | truncated[0]):
                finished = True
                break
            if step % skip == 0:
                frames.append(env.render(0))
        summary = env.stats.drain()
        if finished and summary.count:
            score = summary.score_mean
        else:
            running = getattr(env.stats, "running_score", None)
            score = float(running[0]) if running is not None else None
        write_gif(frames, path, fps=gif_fps(env))
        return GifResult(Path(path), episode_return, score, len(frames), time.perf_counter() - started)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


GIF_SECONDS_PER_FRAME_ESTIMATE = 0.005  # the first GIF's cost guess; later ones use the measured cost


class GifBudget:
    """Keeps rollout GIFs to `time_fraction` of the training time: a scheduled GIF (every
    `interval` updates) is skipped when its expected cost would go over the budget. The cost is
    guessed from the current episode length and the measured cost per frame."""

    def __init__(self, interval: int, max_frames: int, time_fraction: float, seconds_spent: float = 0.0):
        self.interval = interval
        self.max_frames = max_frames
        self.time_fraction = time_fraction
        self.seconds_spent = seconds_spent         # saved in checkpoints: a resumed run keeps its budget
        self.seconds_per_frame = GIF_SECONDS_PER_FRAME_ESTIMATE

    def due(self, update: int, training_seconds: float, episode_length: float | None) -> bool:
        if not self.interval or update % self.interval:
            return False
        if self.time_fraction >= 1.0:  # no budget
            return True
        expected_cost = self.seconds_per_frame * min(self.max_frames, episode_length or self.max_frames)
        return self.seconds_spent + expected_cost <= self.time_fraction * training_seconds

    def spent(self, result: GifResult) -> None:
        self.seconds_spent += result.seconds
        self.seconds_per_frame = result.seconds / max(1, result.frames)


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
    return atomic_write(path, lambda file: quantised[0].save(
        file, format="GIF", save_all=True, append_images=quantised[1:],
        duration=max(20, round(1000 / max(1, fps))), loop=0, optimize=False))
