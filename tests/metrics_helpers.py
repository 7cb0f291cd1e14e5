"""A run folder written the way the trainer writes one (config.yaml, metrics.jsonl), with the
returns and losses a test chooses, for the exporter and the studio's warnings."""

from __future__ import annotations

from pathlib import Path

from trainer.config.defaults import load_config
from trainer.run.events import make_event
from trainer.run.layout import events_path, write_config
from trainer.run.sinks import JsonlSink

METRIC_DEFAULTS = dict(
    fps=1000.0,
    elapsed=1.0,
    episodes=10,
    episode_return_mean=1.0,
    episode_length_mean=20.0,
    episode_score_mean=1.0,
    policy_loss=0.1,
    value_loss=0.5,
    entropy=0.6,
    approx_kl=0.01,
    clip_fraction=0.1,
    explained_variance=0.2,
    learning_rate=3e-4,
)


def metrics_event(update: int, recent_return: float | None, **fields) -> dict:
    values = {
        **METRIC_DEFAULTS,
        "step": update * 512,
        "update": update,
        "recent_return_mean": recent_return,
        "episodes": update * 10,
        **fields,
    }
    return make_event("metrics", **values)


def write_run(
    runs_dir: Path,
    run_id: str,
    returns: list[float | None],
    losses: dict[int, dict] | None = None,
    end: str | None = None,
    **overrides,
) -> Path:
    """A run whose update i (1-based) has recent return returns[i-1]; losses[i] overrides fields."""
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    config = load_config(None, [f"{key}={value}" for key, value in overrides.items()])
    write_config(run_dir, config)
    sink = JsonlSink(events_path(run_dir))
    sink(
        make_event(
            "start", run_id=run_id, config=config.to_dict(), device="cpu", total_timesteps=10**6, resumed_from_step=None
        )
    )
    for update, value in enumerate(returns, start=1):
        sink(metrics_event(update, value, **(losses or {}).get(update, {})))
    if end is not None:
        sink(make_event("end", status=end, step=len(returns) * 512, final_model=None))
    return run_dir


def cartpole_cli(runs_dir, *args: str) -> list[str]:
    """`python -m trainer -c configs/cartpole.yaml --runs-dir RUNS_DIR ARGS...` as a command list."""
    import sys

    return [sys.executable, "-m", "trainer", "-c", "configs/cartpole.yaml", "--runs-dir", str(runs_dir), *args]
