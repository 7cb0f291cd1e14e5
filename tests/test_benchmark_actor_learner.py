"""Smoke test of `python -m benchmarks.actor_learner` (benchmarks/actor_learner.py): the table it
prints gives each contender's figures with its ratio against synchronous PPO, and (slow) on a low
threshold every contender really trains and is measured. It asserts what the benchmark reports,
never a speed."""

from __future__ import annotations

import json

import pytest

from benchmarks import actor_learner


def _run(steps_per_second, hit_seconds, lag=None) -> dict:
    return {
        "updates": 10,
        "steps": 40960,
        "steps_per_second": steps_per_second,
        "thresholds": {
            "200.0": None
            if hit_seconds is None
            else {"training_seconds": hit_seconds - 5, "seconds_from_launch": hit_seconds, "steps": 30000}
        },
        "best_recent_return": 150.0,
        "policy_lag_mean": lag,
        "policy_lag_max": None if lag is None else 3,
        "dropped_batches": None if lag is None else 0,
        "actor_steps_per_second": None if lag is None else 9000.0,
        "bound_seconds": 40.0,
        "error": "",
    }


def test_the_table_puts_every_contender_beside_the_peer_with_its_ratio():
    results = {
        "config": "configs/cartpole.yaml",
        "cores": 2,
        "load_at_start": 1.0,
        "thresholds": [200.0],
        "runs": {"ppo": _run(40000.0, 10.0), "appo, 2 actors": _run(20000.0, None, lag=1.5)},
    }
    lines = actor_learner.table(results)
    steps = next(line for line in lines if line.startswith("| learner steps/s"))
    assert "40,000 (1.00x)" in steps and "20,000 (0.50x)" in steps
    reached = next(line for line in lines if line.startswith("| return 200"))
    assert (
        "5.0 s / 10.0 s (1.00x), 30 k steps" in reached
        and "not reached: best 150 in 41 k steps (bound 40 s)" in reached
    )
    lag = next(line for line in lines if line.startswith("| policy lag"))
    assert lag.endswith("| - | 1.50 / 3 |")


@pytest.mark.slow
def test_every_contender_trains_and_is_measured(tmp_path):
    results = actor_learner.run_actor_learner(seconds=90.0, thresholds=(40.0,), out=tmp_path)
    assert json.loads((tmp_path / "actor_learner.json").read_text())["runs"].keys() == results["runs"].keys()
    assert len(results["runs"]) == 4
    for name, run in results["runs"].items():
        assert run["steps_per_second"] and run["thresholds"]["40.0"] is not None, (name, run)
        actors = "actor" in name
        assert (run["policy_lag_mean"] is not None) == actors and (run["actor_steps_per_second"] is not None) == actors
