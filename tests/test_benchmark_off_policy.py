"""Smoke test of the suite's off_policy section (benchmarks/off_policy.py): on minuscule budgets every
task runs on both sides, our DQN / SAC and Stable-Baselines3's, and the table gives both figures and
a ratio; the budget evaluation (train a fixed budget, then play deterministically) runs on both
sides and its goal is judged from the figures. It asserts what the section produces, never a speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("matplotlib")
pytest.importorskip("Box2D")  # the lunar landers (requirements.txt installs it)

from benchmarks import contender, off_policy, off_policy_report, options, run  # noqa: E402

TINY_DQN = """\
env_name: {env}
algo: dqn
model_type: ppo-small
num_envs: 4
num_steps: 4
gradient_steps: 1
mini_batch_size: 32
buffer_size: 2000
learning_starts: 64
target_update_interval: 64
exploration_fraction: 0.5
learning_rate: 1e-3
anneal_lr: false
total_timesteps: 600
"""
TINY_SAC = """\
env_name: {env}
algo: sac
model_type: ppo-small
num_envs: 1
num_steps: 1
gradient_steps: 1
mini_batch_size: 32
buffer_size: 2000
learning_starts: 64
learning_rate: 1e-3
anneal_lr: false
gamma: 0.99
norm_obs: false
norm_reward: false
total_timesteps: 300
"""
FILES = {
    "cartpole_dqn.yaml": TINY_DQN.format(env="cartpole"),
    "lunar_lander_dqn.yaml": TINY_DQN.format(env="LunarLander-v3"),
    "pendulum_sac.yaml": TINY_SAC.format(env="Pendulum-v1"),
    "lunar_lander_continuous_sac.yaml": TINY_SAC.format(env="LunarLanderContinuous-v3"),
}


def _in_this_process(kind: str, params: dict, threads: int, timeout: float) -> dict:
    """The suite's runner without the fresh process (the slow part); a failure reported as the
    real runner reports it."""
    try:
        return contender.run_measurement(kind, params)
    except Exception as error:
        return {"error": f"{kind}: {type(error).__name__}: {error}"}


@pytest.fixture
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_off_policy_section_runs_both_sides_and_prints_ratios(tmp_path, monkeypatch, capsys, one_torch_thread):
    configs, out = tmp_path / "configs", tmp_path / "results"
    configs.mkdir()
    for name, text in FILES.items():
        (configs / name).write_text(text)
    monkeypatch.setattr(run, "run_in_fresh_process", _in_this_process)
    monkeypatch.setattr(off_policy, "MANY_ENVS", {"num_envs": 32, "num_steps": 1, "gradient_steps": 1})
    monkeypatch.setattr(off_policy, "QUICK_BUDGET_STEPS", 200)  # --quick caps the budget evaluation

    exit_code = run.main(
        [
            "--only",
            "off_policy",
            "--quick",
            "--seeds",
            "1",
            "--off-policy-cap",
            "20",
            "--lunar-cap",
            "20",
            "--off-policy-steps",
            "512",
            "--configs",
            str(configs),
            "--out",
            str(out),
        ]
    )

    assert exit_code == 0
    printed = capsys.readouterr().out
    section = json.loads((out / "off_policy.json").read_text())["off_policy"]
    assert not (out / "results.md").exists()  # run alone, the section leaves the suite's table alone
    assert set(section["tasks"]) == {task.name for task in off_policy.TASKS}
    for entry in section["tasks"].values():
        assert "error" not in entry, entry
        for side in ("ours", "sb3"):
            (result,) = entry[side]
            assert "error" not in result, (entry["label"], side, result["error"])
            assert result["steps"] > 0 and result["steps_per_second"] > 0
    # Both sides ran the same settings: our config's, forced to what SB3 can do.
    assert section["tasks"]["dqn_cartpole"]["settings"]["num_envs"] == 4
    assert "double_q=false" in section["tasks"]["dqn_cartpole"]["forced"]
    throughput = section["throughput"]
    assert "error" not in throughput["ours_native"] and "error" not in throughput["sb3"], throughput
    assert throughput["ours_native"]["env_name"] == "cartpole" and throughput["ours_native"]["num_envs"] == 32
    budget = section["tasks"]["sac_pendulum"]["budget"]
    assert budget["steps"] == 200 and budget["goal"] == -200.0
    for side in ("ours", "sb3"):
        (result,) = budget[side]
        assert "error" not in result, (side, result["error"])
        assert result["steps"] == 200 and result["evaluation"]["episodes"] == off_policy.EVAL_EPISODES
        assert all(math.isfinite(value) for value in result["evaluation"]["returns"])
    assert all("budget" not in entry for name, entry in section["tasks"].items() if name != "sac_pendulum")

    # The table a person reads, in the console and in off_policy.md: ours, SB3 and a ratio.
    for text in (printed, (out / "off_policy.md").read_text()):
        for task in off_policy.TASKS:
            line = next(
                line
                for line in text.splitlines()
                if line.startswith(f"{task.label}: steps/s") or (line.startswith(f"| {task.label}: steps/s"))
            )
            assert line.count("steps/s") >= 3 and "x" in line.split("steps/s")[-1], line
        rate_line = next(line for line in text.splitlines() if "DQN CartPole throughput, 32 envs" in line)
        ours_cell, sb3_cell, ratio_cell = _cells(rate_line)[1:4]
        assert ours_cell.endswith("steps/s") and sb3_cell.endswith("steps/s") and ratio_cell.endswith("x")
        assert "training seconds to mean-100 return 475" in text
        assert "SAC, Pendulum-v1: deterministic evaluation return after 200 env steps (RL Zoo's budget" in text
    assert (out / "off_policy.md").read_text().count("cannot pass -200 within RL Zoo's budget") == 1
    with Path(out / "off_policy.png").open("rb") as image:
        assert image.read(8) == b"\x89PNG\r\n\x1a\n"


def _cells(line: str) -> list[str]:
    """The cells of a table line, markdown (`| a | b |`) or console (columns two spaces apart)."""
    if line.startswith("|"):
        return [cell.strip() for cell in line.strip().strip("|").split("|")]
    return [cell.strip() for cell in line.split("  ") if cell.strip()]


def test_unreached_target_says_why_and_bounds_the_ratio():
    """A side that never reached the target: the table says whether the cap or the run's steps ran
    out, and the ratio is the bound its run still gives; no side reached it: no ratio at all."""

    def run(solved, seconds, steps, capped, final=-50.0):
        return {
            "steps": steps,
            "train_seconds": seconds,
            "steps_per_second": steps / seconds,
            "solved": solved,
            "solve_train_seconds": seconds if solved else None,
            "solve_step": steps if solved else None,
            "capped": capped,
            "final_return_mean": final,
        }

    entry = {"label": "DQN, LunarLander-v3", "target": 200.0, "cap_seconds": 900.0, "config": "x.yaml"}
    capped = dict(entry, ours=[run(False, 901.0, 1000, True)], sb3=[run(False, 902.0, 400, True, 12.0)])
    seconds, steps, rate = off_policy.task_rows(capped)
    assert (
        seconds.ours == "not reached in 900 s (ended at -50)" and seconds.peer == "not reached in 900 s (ended at 12)"
    )
    assert seconds.ratio == "" and steps.ratio == ""
    assert rate.ratio == "2.5x"  # steps/s: ours / SB3

    out_of_steps = dict(entry, ours=[run(True, 100.0, 5000, False)], sb3=[run(False, 300.0, 20000, False, 115.0)])
    seconds, steps, _ = off_policy.task_rows(out_of_steps)
    assert seconds.ours == "100.0 s" and seconds.peer == "not reached in its 20,000 steps (300 s, ended at 115)"
    assert seconds.ratio == "> 3.0x" and steps.ratio == "> 4.0x"


def test_budget_evaluation_on_our_side_plays_ten_deterministic_episodes(one_torch_thread):
    """A real run: our SAC trains exactly a tiny budget, then the project's evaluator plays its final
    model (before the run's temporary folder goes) for EVAL_EPISODES episodes on the seed given."""
    overrides = off_policy.SB3_HAS_NONE["sac"] + ["total_timesteps=320", "learning_starts=160", "num_envs=4"]
    result = off_policy.ours_off_policy(
        str(Path(run.__file__).parent.parent / "configs" / "pendulum_sac.yaml"),
        overrides,
        eval_episodes=off_policy.EVAL_EPISODES,
        eval_seed=10_003,
    )
    assert result["steps"] == 320 and not result["solved"]
    evaluation = result["evaluation"]
    assert evaluation["episodes"] == off_policy.EVAL_EPISODES == len(evaluation["returns"]) == 10
    assert evaluation["seed"] == 10_003
    assert all(math.isfinite(value) and value < 0 for value in evaluation["returns"])  # Pendulum pays costs
    assert evaluation["return_min"] == min(evaluation["returns"]) <= evaluation["return_mean"]


def _evaluated(means: list[float | None]) -> list[dict]:
    """Runs of a budget evaluation with these mean returns (None: the run failed)."""
    return [
        {"error": "RuntimeError: boom"}
        if mean is None
        else {"steps": 20_000, "evaluation": {"episodes": 10, "return_mean": mean, "return_min": mean - 40.0}}
        for mean in means
    ]


def test_budget_row_judges_the_goal_from_the_figures():
    entry = {"label": "SAC, Pendulum-v1", "target": -200.0, "cap_seconds": 300.0, "parts": ["budget"]}
    entry.update(config="pendulum_sac.yaml", ours=[], sb3=[])
    budget = {"steps": 20_000, "source": "RL Zoo's budget", "why": "Why.", "episodes": 10, "goal": -200.0}

    def row(ours, sb3):
        rows = off_policy.off_policy_rows(
            {"tasks": {"sac_pendulum": dict(entry, budget=dict(budget, ours=ours, sb3=sb3))}}
        )
        (only,) = rows  # a budget-only run: no mean-100 rows for the task
        return only

    met = row(_evaluated([-150.0, -190.0, -320.0]), _evaluated([-180.0, -160.0, -170.0]))
    assert met.measurement == (
        "SAC, Pendulum-v1: deterministic evaluation return after 20,000 env steps "
        "(RL Zoo's budget; median of 3 seed(s), 10 episodes each)"
    )
    assert met.ours == "-190.0 (seeds -150, -190, -320; worst episode -360)"
    assert met.peer.startswith("-170.0 (seeds -180, -160, -170")
    assert (met.goal, met.met) == (">= -200", "yes")

    missed = row(_evaluated([-150.0, -210.0, -320.0]), _evaluated([-150.0]))
    assert missed.ours.startswith("-210.0") and (missed.goal, missed.met) == (">= -200", "NO")

    failed = row(_evaluated([None, None]), _evaluated([-150.0, None]))
    assert failed.ours.startswith("FAILED: RuntimeError: boom") and failed.met == "n/a"
    assert failed.peer.endswith("; 1 FAILED")

    section = {"tasks": {"sac_pendulum": dict(entry, budget=dict(budget, ours=[], sb3=[]))}}
    (text, blank) = off_policy_report.budget_text(section)
    assert text.count("Why.") == 1 and "10 episodes deterministically" in text and blank == ""
    assert off_policy_report.budget_text({"tasks": {"dqn_cartpole": dict(entry)}}) == []


def test_off_policy_tasks_picks_tasks_and_parts():
    every = off_policy.selected_parts(None)
    assert set(every) == {task.name for task in off_policy.TASKS} | {"throughput"}
    assert off_policy.selected_parts(["sac_pendulum:budget"]) == {"sac_pendulum": ("budget",)}
    assert off_policy.selected_parts(["sac_pendulum", "throughput"]) == {
        "sac_pendulum": off_policy.PARTS,
        "throughput": (),
    }
    args = options.parse_args(["--only", "off_policy", "--off-policy-tasks", "sac_pendulum:budget, dqn_cartpole"])
    assert args.off_policy_tasks == ["sac_pendulum:budget", "dqn_cartpole"]
    for wrong in ("sac_pendulm", "sac_pendulum:steps"):
        with pytest.raises(SystemExit):
            options.parse_args(["--only", "off_policy", "--off-policy-tasks", wrong])
