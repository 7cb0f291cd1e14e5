"""The sampler and the pruner of a sweep: their names and options in the sweep file, checked
(`read_choice`), and the Optuna objects built from them.

    pruner: median                                    # or hyperband, none; options beside the name:
    pruner: {name: median, reports: 20, startup_trials: 5, warmup_reports: 5}
    sampler: {name: tpe, seed: 0, startup_trials: 10} # or random

`reports` is how many evenly spaced points of the budget each trial reports its metric at: the
pruner's steps, 1..reports (trainer/sweep/objective.py TrialCurve).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.config.checks import did_you_mean, number_from_text, short_repr

PRUNERS = {  # name -> its options and their defaults (None: derived from `reports`)
    "median": {"reports": 20, "startup_trials": 5, "warmup_reports": None},
    "hyperband": {"reports": 20, "min_reports": 1, "reduction_factor": 3},
    "none": {"reports": 20},
}
SAMPLERS = {"tpe": {"seed": None, "startup_trials": 10}, "random": {"seed": None}}


@dataclass(frozen=True)
class Choice:
    """The pruner or the sampler: its name and options (every option filled in)."""

    name: str
    options: dict = field(default_factory=dict)


def read_choice(section: str, raw: Any, table: dict[str, dict], problems: list[str]) -> Choice:
    """`pruner: median` or `pruner: {name: median, startup_trials: 5}`, checked against `table`
    (name -> its options with their defaults); a problem found is added to `problems`."""
    raw = {"name": raw} if isinstance(raw, str) else raw
    name = raw.get("name", "").strip().lower() if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
    if name not in table:
        hint = did_you_mean(name, table) if name else ""
        problems.append(
            f"{section} must be one of {', '.join(table)} (with options: {{name: ..., ...}}), got {short_repr(raw)}.{hint}"
        )
        return Choice(next(iter(table)), dict(table[next(iter(table))]))
    options = dict(table[name])
    for option, value in raw.items():
        value, least = number_from_text(value), 1 if option in ("reports", "reduction_factor") else 0
        if option == "name":
            continue
        if option not in options:
            hint = did_you_mean(option, options)
            problems.append(
                f"{section} {name}: unknown option {short_repr(option)}.{hint} It takes: {', '.join(options)}"
            )
        elif isinstance(value, bool) or not isinstance(value, int) or value < least:
            problems.append(f"{section} {name}: {option} must be a whole number >= {least}, got {short_repr(value)}")
        else:
            options[option] = value
    if name == "median" and options["warmup_reports"] is None:
        options["warmup_reports"] = options["reports"] // 4  # early reports are noisy: no pruning before
    return Choice(name, options)


def build_pruner(choice: Choice) -> Any:
    import optuna

    options = choice.options
    if choice.name == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=options["startup_trials"], n_warmup_steps=options["warmup_reports"]
        )
    if choice.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=options["min_reports"],
            max_resource=options["reports"],
            reduction_factor=options["reduction_factor"],
        )
    return optuna.pruners.NopPruner()


def build_sampler(choice: Choice, trials_so_far: int) -> Any:
    """TPE or random; a seeded sampler continues at seed + trials so far (never replays them)."""
    import optuna

    seed = None if choice.options["seed"] is None else choice.options["seed"] + trials_so_far
    if choice.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials running at once are not sampled on top of each other
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=choice.options["startup_trials"], constant_liar=True)
