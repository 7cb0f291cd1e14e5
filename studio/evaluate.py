"""The Evaluate tab's work: load a .pth safely, play it for some episodes, make a GIF.

Loading goes through `trainer.load_model` (weights only: a crafted file cannot run code). The
model's own config names its environment; an entry-point env or wrapper in it (a module the
server would import) is refused unless the studio runs with --allow-custom-envs
(trainer.config.permissions.require_code_permission, the rule the Train form and Resume use too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainer.config.permissions import CodePermissionError, require_code_permission

MAX_EPISODES = 1000


class EvaluationError(Exception):
    """The model cannot be evaluated; the message says why, for people."""


@dataclass(frozen=True)
class EvaluationSummary:
    env_name: str
    model_step: int
    episodes: int
    deterministic: bool
    return_mean: float
    return_std: float
    score_mean: float
    score_std: float
    cut_episodes: int
    gif_path: str | None
    gif_caption: str | None = None  # what the GIF shows of the first episode (trainer/run/events.py clip_caption)
    # Where the game has them (trainer/serving/evaluate.py count_outcomes), else None.
    wins: int | None = None  # games won, e.g. Snake's board filled
    win_text: str | None = None
    capped: int | None = None  # games that lasted the env's step cap (Flappy Bird's max_steps)
    cap_steps: int | None = None

    def markdown(self) -> str:
        from studio.score import format_number, game_score

        mode = "deterministic" if self.deterministic else "sampled actions"
        score = game_score(self.env_name)  # the game's unit first; the shaped return under it
        spread = f"{format_number(self.return_mean)} ± {format_number(self.return_std)}"
        if score.is_return:
            headline, detail = f"### Return {spread}", "Over"
        else:
            headline = f"### {format_number(self.score_mean)} ± {format_number(self.score_std)} {score.unit}"
            detail = f"Return {spread} over"
        lines = [
            headline,
            f"{detail} **{self.episodes}** episodes of **{self.env_name}** ({mode}); the model was trained "
            f"for {self.model_step:,} steps.",
        ]
        lines += self.outcome_lines()
        if self.cut_episodes:
            lines.append(f"{self.cut_episodes} episode(s) were cut at the step limit.")
        if self.gif_path and self.gif_caption:
            lines.append(f"The GIF, the first episode: {self.gif_caption}.")
        return "\n\n".join(lines)

    def outcome_lines(self) -> list[str]:
        """Wins and games that reached the cap, where the game has them."""
        lines = []
        if self.wins is not None:
            what = f" ({self.win_text})" if self.win_text else ""
            lines.append(f"Wins{what}: **{self.wins} of {self.episodes}** games.")
        if self.capped is not None:
            lines.append(f"Reached the cap of {self.cap_steps:,} steps: **{self.capped} of {self.episodes}** games.")
        return lines


def runs_with_models(runs: Sequence) -> list[str]:
    """Ids of the runs (newest first, as RunManager.list_runs gives them) that have a model file."""
    return [run.run_id for run in runs if run.final_model or run.latest_checkpoint]


def preselected_run(runs: Sequence, current: str | None = None, viewed: str | None = None) -> str | None:
    """The run the Evaluate tab picks for its visitor: the run last viewed (on the Train tab, or
    picked on the Runs or Evaluate tab; a run just stopped has its model) while it has a model,
    else the one already picked while it still has one, else the newest finished run with a final
    model, else the newest run with any model."""
    choices = runs_with_models(runs)
    for run_id in (viewed, current):
        if run_id in choices:
            return run_id
    finished = [run.run_id for run in runs if run.status == "finished" and run.final_model]
    return (finished or choices or [None])[0]


def parse_episodes(value: object) -> int:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not number.is_integer() or not 1 <= number <= MAX_EPISODES:
        raise EvaluationError(f"episodes must be a whole number from 1 to {MAX_EPISODES}, got {value!r}.")
    return int(number)


def evaluate_checkpoint(
    path: str | Path,
    episodes: object = 10,
    deterministic: bool = True,
    allow_custom_envs: bool = False,
    gif_path: str | Path | None = None,
    gif_max_frames: int = 400,
) -> EvaluationSummary:
    """Play the model in `path` for `episodes` episodes; a GIF of the first one goes to `gif_path`."""
    import torch

    from trainer.run.checkpoint import CheckpointError, load_model
    from trainer.serving.evaluate import EnvMismatchError, evaluate

    episode_count = parse_episodes(episodes)
    if not str(path).lower().endswith((".pth", ".pt")):
        raise EvaluationError(f"{Path(path).name} is not a .pth file: pick a model saved by RL Studio.")
    torch.set_num_threads(1)  # leave the cores to the trainers
    try:
        model = load_model(path, device="cpu")
    except CheckpointError as error:
        raise EvaluationError(f"Could not use {Path(path).name}: {error}") from None
    config = dict(model.config or {})
    if not config.get("env_name"):
        raise EvaluationError(f"{Path(path).name} does not say which environment it was trained on.")
    try:  # the one permission rule (a model file is data); its checkpoint.path is irrelevant here
        require_code_permission(config, allow_custom_envs, Path(path).name, "`python app.py --allow-custom-envs`")
    except CodePermissionError as error:
        raise EvaluationError(f"This model's environment cannot be loaded here: {error}") from None
    try:
        result = evaluate(
            model,
            episodes=episode_count,
            deterministic=deterministic,
            gif_path=gif_path,
            gif_max_frames=gif_max_frames,
            max_episode_steps=20_000,
            allow_custom_code=allow_custom_envs,
        )
    except EnvMismatchError as error:  # its message names both shapes and what to do
        raise EvaluationError(f"Could not evaluate {Path(path).name}: {error}") from None
    except Exception as error:  # noqa: BLE001 - env construction or playing failed: say so, do not crash
        raise EvaluationError(f"Playing {Path(path).name} failed: {type(error).__name__}: {error}") from None
    return EvaluationSummary(
        env_name=str(config["env_name"]),
        model_step=model.global_step,
        episodes=result.episodes,
        deterministic=deterministic,
        return_mean=result.return_mean,
        return_std=result.return_std,
        score_mean=result.score_mean,
        score_std=result.score_std,
        cut_episodes=result.cut_episodes,
        gif_path=str(result.gif_path) if result.gif_path else None,
        gif_caption=result.gif_caption,
        wins=result.wins,
        win_text=result.win_text,
        capped=result.capped,
        cap_steps=result.cap_steps,
    )
