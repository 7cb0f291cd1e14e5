"""Play a trained model for a number of episodes and report return and score.

    python -m trainer evaluate runs/<run>/cartpole_ppo_final.pth --episodes 100 --gif play.gif

    from trainer.serving.evaluate import evaluate
    result = evaluate("runs/<run>/cartpole_ppo_final.pth", episodes=100)
    result.return_mean, result.return_std, result.score_mean

Episodes run in parallel on a batch of envs; env i plays its share of the episodes, so short
episodes are not over-counted (as in Stable-Baselines3's evaluate_policy).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trainer.run.checkpoint import TrainedModel, load_model


@dataclass
class EvaluationResult:
    returns: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    cut_episodes: int = 0  # episodes stopped at max_episode_steps
    # Where the game has them (`count_outcomes`), else None: games won (the env's `winning_score`
    # reached, e.g. Snake's full board) and games that reached the env's step cap (its max_steps).
    wins: int | None = None
    win_text: str | None = None  # what a win is, e.g. "board filled"
    capped: int | None = None
    cap_steps: int | None = None
    gif_path: Path | None = None
    gif_caption: str | None = None  # what the GIF shows of its episode (trainer/run/events.py clip_caption)

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @staticmethod
    def _mean_std(values: list[float]) -> tuple[float, float]:
        if not values:
            return float("nan"), float("nan")
        return statistics.fmean(values), statistics.pstdev(values)

    @property
    def return_mean(self) -> float:
        return self._mean_std(self.returns)[0]

    @property
    def return_std(self) -> float:
        return self._mean_std(self.returns)[1]

    @property
    def score_mean(self) -> float:
        return self._mean_std(self.scores)[0]

    @property
    def score_std(self) -> float:
        return self._mean_std(self.scores)[1]

    def summary(self) -> str:
        lines = [
            f"episodes: {self.episodes}"
            + (f" ({self.cut_episodes} cut at the step limit)" if self.cut_episodes else ""),
            f"return:   {self.return_mean:.2f} +/- {self.return_std:.2f} (min {min(self.returns):.2f}, "
            f"max {max(self.returns):.2f})",
            f"score:    {self.score_mean:.2f} +/- {self.score_std:.2f} (min {min(self.scores):.2f}, "
            f"max {max(self.scores):.2f})",
            f"length:   {statistics.fmean(self.lengths):.1f} steps on average",
        ]
        lines += self.outcome_lines()
        if self.gif_path is not None:
            lines.append(f"gif:      {self.gif_path} ({self.gif_caption})")
        return "\n".join(lines)

    def outcome_lines(self) -> list[str]:
        """`wins:` and `cap:` lines where the game has them."""
        lines = []
        if self.wins is not None:
            lines.append(f"wins:     {self.wins} of {self.episodes} ({self.win_text or 'won'})")
        if self.capped is not None:
            lines.append(f"cap:      {self.capped} of {self.episodes} reached the cap of {self.cap_steps:,} steps")
        return lines

    def as_dict(self) -> dict:
        """The figures as plain values (JSON), the per-episode lists included."""
        return {
            "episodes": self.episodes,
            "return_mean": self.return_mean,
            "return_std": self.return_std,
            "score_mean": self.score_mean,
            "score_std": self.score_std,
            "score_min": min(self.scores, default=None),
            "cut_episodes": self.cut_episodes,
            "wins": self.wins,
            "win_text": self.win_text,
            "capped": self.capped,
            "cap_steps": self.cap_steps,
            "returns": self.returns,
            "scores": self.scores,
            "lengths": self.lengths,
        }


def step_cap(env) -> int | None:
    """The env's own episode step cap (Flappy Bird's `max_steps`, CartPole's `max_episode_steps`),
    None where it has none (Snake ends hungry snakes by `max_steps_without_food`: not a cap)."""
    for name in ("max_steps", "max_episode_steps"):
        value = getattr(env, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def count_outcomes(result: EvaluationResult, env) -> None:
    """Fill in `wins` (episodes whose score reached the env's `winning_score`) and `capped`
    (episodes that lasted the env's step cap), from the recorded scores and lengths; each stays
    None where the env has no such thing."""
    winning_score = getattr(env, "winning_score", None)
    if winning_score is not None:
        result.wins = sum(1 for score in result.scores if score >= winning_score)
        result.win_text = getattr(env, "win_text", None)
    cap = step_cap(env)
    if cap is not None:
        result.cap_steps = cap
        result.capped = sum(1 for length in result.lengths if length >= cap)


@dataclass(frozen=True)
class EnvChoice:
    """The env a model plays: its name, options and wrappers."""

    name: str
    kwargs: dict
    wrappers: list[str] | None


def choose_env(
    model: TrainedModel,
    env_name: str | None = None,
    env_kwargs: dict | None = None,
    allow_custom_code: bool = False,
    source: str = "the model file",
    flag: str = "evaluate(..., allow_custom_code=True)",
) -> EnvChoice:
    """Which env evaluating `model` builds. A model file is data: the env the user names wins;
    the saved env_name is used only when it is a built-in or a registered Gymnasium id, and an
    entry point (`module:Class` env or wrappers) saved in the file is refused unless the user
    allowed custom code (trainer.config.permissions.require_code_permission, naming `flag`).
    The saved env_kwargs come without the options that only shape training (a curriculum)."""
    from envs import resolve_env_name
    from envs.errors import EnvError
    from envs.registry import played_env_kwargs
    from trainer.config.permissions import require_code_permission

    saved = model.config or {}
    wrappers = saved.get("wrappers") or None
    if env_name is not None:  # the user's own choice; the file's wrappers and options still need checking
        require_code_permission({"wrappers": wrappers}, allow_custom_code, source, flag)
        same_env = env_name == saved.get("env_name")
        saved_kwargs = played_env_kwargs(env_name, saved.get("env_kwargs")) if same_env else {}
        kwargs = env_kwargs if env_kwargs is not None else saved_kwargs
        return EnvChoice(env_name, dict(kwargs), wrappers if same_env else None)
    saved_name = saved.get("env_name")
    if not isinstance(saved_name, str) or not saved_name:
        raise ValueError(f"{source} does not say which environment it was trained on; name one (--env NAME)")
    require_code_permission({"env_name": saved_name, "wrappers": wrappers}, allow_custom_code, source, flag)
    try:
        resolve_env_name(saved_name)
    except EnvError as error:
        raise ValueError(
            f"{source} was trained on {saved_name[:100]!r}, which is not an environment here "
            f"({str(error)[:200]}); name one (--env NAME)"
        ) from None
    kwargs = env_kwargs if env_kwargs is not None else played_env_kwargs(saved_name, saved.get("env_kwargs"))
    if not isinstance(kwargs, dict):
        raise ValueError(f"{source}: env_kwargs must be a mapping, got {type(kwargs).__name__}")
    return EnvChoice(saved_name, dict(kwargs), wrappers)


class EnvMismatchError(ValueError):
    """The env's observations or actions are not the ones the model's network was built for."""


def check_env_fits(model: TrainedModel, env, env_name: str) -> None:
    """Before the first forward pass, so that a model on the wrong game is told which shapes
    differ (torch would say only "mat1 and mat2 shapes cannot be multiplied")."""
    from envs import resolve_env_name
    from envs.errors import EnvError

    def canonical(name):
        try:
            return resolve_env_name(name)
        except (EnvError, TypeError, ValueError):
            return name

    trained_on = (model.config or {}).get("env_name")
    if trained_on and canonical(trained_on) != canonical(env_name):
        advice = f"evaluate it on the env it was trained on ({trained_on})"
    else:
        advice = (
            f"the model's config names {env_name}, but its network was built for another env: the env or "
            f"its env_kwargs changed since the model was trained, or the file was edited"
        )
    expected, given = list(model.observation_shape), [int(size) for size in env.single_observation_space.shape]
    if given != expected:
        raise EnvMismatchError(
            f"the model expects observations of shape {expected} but {env_name} gives {given}: {advice}"
        )
    action, space = model.spec["action"], env.single_action_space
    if action["kind"] == "discrete":
        wanted, fits = f"one of {action['n']} actions", getattr(space, "n", None) == action["n"]
    else:
        wanted, fits = (
            f"{action['dim']} continuous action values",
            tuple(getattr(space, "shape", ())) == (action["dim"],) and not hasattr(space, "n"),
        )
    if not fits:
        raise EnvMismatchError(f"the model chooses {wanted} but {env_name} takes {space}: {advice}")


@torch.no_grad()
def evaluate(
    model: TrainedModel | str | Path,
    episodes: int = 10,
    num_envs: int | None = None,
    device: str = "cpu",
    seed: int = 0,
    deterministic: bool = True,
    gif_path: str | Path | None = None,
    gif_max_frames: int = 1000,
    max_episode_steps: int = 100_000,
    env_name: str | None = None,
    env_kwargs: dict | None = None,
    allow_custom_code: bool = False,
) -> EvaluationResult:
    """Play `episodes` episodes with the model on `env_name`, or on the env it was trained on if
    that is a built-in or a registered Gymnasium id (see `choose_env`). allow_custom_code: let a
    `module:Class` env or wrappers saved in the model's config be imported (that runs their code)."""
    from envs import make_vec_env
    from trainer.run.events import clip_caption
    from trainer.run.gif import frame_skip, gif_fps, write_gif

    if episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes}")
    source = "the model" if isinstance(model, TrainedModel) else str(model)
    if not isinstance(model, TrainedModel):
        model = load_model(model, device=device)
    choice = choose_env(model, env_name, env_kwargs, allow_custom_code, source)
    if model.device.type == "cpu" and model.spec["model_type"] != "ppo-cnn":
        torch.set_num_threads(1)  # small MLPs: extra threads only spin
    num_envs = num_envs or min(episodes, 64)
    env = make_vec_env(choice.name, num_envs, device=model.device, seed=seed, wrappers=choice.wrappers, **choice.kwargs)
    try:
        check_env_fits(model, env, choice.name)
        policy = model.policy
        targets = [(episodes + index) // num_envs for index in range(num_envs)]
        counts = [0] * num_envs
        current_length = np.zeros(num_envs, dtype=np.int64)
        skip_rest_of_episode = [False] * num_envs  # after a cut episode, until that episode really ends
        result = EvaluationResult()
        frames: list[np.ndarray] = []
        recording = gif_path is not None
        gif_episode = None  # env 0's first episode, the GIF's: (steps, ended, return, score)
        obs = env.reset(seed=seed)
        state = starts = None  # a recurrent policy's state, carried from step to step (else None)
        skip = frame_skip(env)
        steps = 0
        while any(count < target for count, target in zip(counts, targets)):
            if recording and steps % skip == 0:
                frames.append(env.render(0))
            steps += 1
            mask = env.action_masks()  # None unless the env forbids some actions
            action, state = policy.play(policy.normalize_obs(obs), state, starts, deterministic, action_mask=mask)
            obs, reward, terminated, truncated, _ = env.step(policy.env_action(action))
            current_length += 1
            starts = terminated | truncated  # those envs reset: their next step starts a new episode
            done = starts.cpu().numpy()
            if done.any():
                # Return, length and score of the episodes that ended on this step, env by env.
                final_return, final_length, final_score = env.stats.finished.cpu().numpy()
                for index in np.flatnonzero(done):
                    if index == 0 and gif_episode is None:
                        recording = False
                        gif_episode = (int(final_length[0]), True, float(final_return[0]), float(final_score[0]))
                    if skip_rest_of_episode[index]:
                        skip_rest_of_episode[index] = False
                    elif counts[index] < targets[index]:
                        counts[index] += 1
                        result.returns.append(float(final_return[index]))
                        result.lengths.append(int(final_length[index]))
                        result.scores.append(float(final_score[index]))
                    current_length[index] = 0
            for index in np.flatnonzero(current_length >= max_episode_steps):
                if counts[index] < targets[index] and not skip_rest_of_episode[index]:
                    counts[index] += 1
                    result.cut_episodes += 1
                    result.returns.append(float(env.stats.running_return[index]))
                    result.lengths.append(int(current_length[index]))
                    result.scores.append(float(env.stats.running_score[index]))
                    skip_rest_of_episode[index] = True
                    if index == 0 and gif_episode is None:
                        recording = False
                        gif_episode = (int(current_length[0]), False, result.returns[-1], result.scores[-1])
            if recording and len(frames) >= gif_max_frames:
                recording = False
        count_outcomes(result, env)
        if gif_path is not None and frames:
            result.gif_path = write_gif(frames, gif_path, fps=gif_fps(env))
            episode_steps, ended, episode_return, episode_score = gif_episode
            # Each frame stands for the `skip` steps played from the state it shows.
            steps_shown = min(episode_steps, len(frames) * skip)
            if len(frames) < gif_max_frames:
                steps_shown = episode_steps  # not cut by the frame limit: the GIF holds all of it
            unit = getattr(env, "score_unit", None)  # None: the score is the return, said once
            result.gif_caption = clip_caption(
                steps_shown, episode_steps, ended, episode_return, episode_score if unit else None, unit
            )
        return result
    finally:
        env.close()
