"""Smoke test of the benchmark suite: every section runs end to end on a minuscule budget and
leaves a table, results.json and PNG plots behind. It asserts what the suite produces, never a
speed (the suite prints speeds; tests do not judge them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("matplotlib")

from benchmarks import contender, run  # noqa: E402

TINY_CARTPOLE = """\
env_name: cartpole
model_type: ppo-small
num_envs: 16
num_steps: 16
mini_batch_size: 64
update_epochs: 1
learning_rate: 2.5e-3
total_timesteps: 2048
"""


def _tiny_configs(folder: Path) -> Path:
    folder.mkdir()
    (folder / "cartpole.yaml").write_text(TINY_CARTPOLE)
    for stem, game in (("flappy_bird", "flappy_bird"), ("flappy_bird_1000", "flappy_bird"), ("snake", "snake")):
        (folder / f"{stem}.yaml").write_text(TINY_CARTPOLE.replace("env_name: cartpole", f"env_name: {game}"))
    return folder


def _in_this_process(kind: str, params: dict, threads: int, timeout: float) -> dict:
    """The suite's runner without the fresh process (the slow part), and SB3's solve budget cut
    from the RL Zoo's 100k steps to a few rollouts."""
    if kind == "sb3_time_to_solve":
        params = dict(params, total_steps=512)
    try:
        return contender.run_measurement(kind, params)
    except Exception as error:  # the real runner reports a failed contender the same way
        return {"error": f"{kind}: {type(error).__name__}: {error}"}


def test_suite_prints_table_and_writes_plots(tmp_path, monkeypatch, capsys):
    import torch

    torch.set_num_threads(1)
    monkeypatch.setattr(run, "run_in_fresh_process", _in_this_process)
    configs, out = _tiny_configs(tmp_path / "configs"), tmp_path / "results"

    exit_code = run.main(
        [
            "--only",
            "throughput,ceiling,solve,scaling",
            "--games",
            "--game-cap",
            "1",
            "--throughput-steps",
            "2048",
            "--seeds",
            "1",
            "--scaling-envs",
            "16,32",
            "--ceiling-seconds",
            "0.05",
            "--configs",
            str(configs),
            "--out",
            str(out),
        ]
    )

    assert exit_code == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    for profile in ("rl_zoo", "shipped"):
        measured = results["throughput"]["profiles"][profile]
        assert "error" not in measured["sb3"] and "error" not in measured["ours_native"], measured
        assert measured["ours_native"]["steps"] >= 2048 and measured["sb3"]["steps"] >= 2048
        assert results["ceiling"][profile]["steps_per_second"] > 0
        assert measured["ours_gym"]["steps"] >= 2048, measured["ours_gym"]
    assert results["shipped_settings"]["num_envs"] == 16
    assert [point["num_envs"] for point in results["scaling"]] == [16, 32]
    assert all("error" not in point for point in results["scaling"])
    assert len(results["time_to_solve"]["ours"]) == len(results["time_to_solve"]["sb3"]) == 1
    assert set(results["games"]) == {"flappy_bird", "flappy_bird_1000", "snake"}
    for game in results["games"].values():
        assert "error" not in game, game
        assert set(game["solve_train_seconds_by_target"]) == {str(t) for t in game["targets"]}
    # The table a person reads: console and markdown, with the SB3 ratios and the goals.
    for text in (printed, (out / "results.md").read_text()):
        assert "Throughput, identical settings (rl_zoo" in text
        assert "Throughput, our shipped config vs SB3 with the RL Zoo config" in text
        assert "End-to-end / update-only ceiling (shipped settings)" in text
        assert "CartPole time to mean-100 return 475" in text
        assert "Scaling: num_envs 32" in text
        assert "flappy_bird: training seconds to mean score 50 pipes" in text
        assert "flappy_bird_1000: training seconds to mean score 100 pipes" in text  # issue 25's goal row
    from PIL import Image

    for name in ("throughput.png", "time_to_solve.png", "scaling.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.width > 300


def test_game_targets_times_the_chosen_configs_on_the_chosen_seed(tmp_path, monkeypatch):
    from benchmarks.options import parse_args

    seen = []
    monkeypatch.setattr(run, "run_in_fresh_process", lambda kind, params, *_: seen.append(params) or {"error": "x"})
    args = parse_args(["--only", "game_targets", "--game-configs", "flappy_bird_1000.yaml", "--game-seed", "2"])
    assert set(run.run_games(args)) == {"flappy_bird_1000"}
    assert [(Path(params["config_path"]).name, params["seed"]) for params in seen] == [("flappy_bird_1000.yaml", 2)]
    assert set(run.run_games(parse_args(["--only", "game_targets"]))) == {"flappy_bird", "flappy_bird_1000", "snake"}


def test_contender_runs_in_fresh_process_and_times_from_launch(tmp_path):
    config = tmp_path / "cartpole.yaml"
    config.write_text(TINY_CARTPOLE.replace("total_timesteps: 2048", "total_timesteps: 4096"))
    # A target that the first finished episodes pass: the point is the timing bookkeeping.
    result = run.run_in_fresh_process(
        "ours_time_to_solve", {"config_path": str(config), "target": 5.0, "cap_seconds": 60.0}, threads=1, timeout=120
    )
    assert "error" not in result, result.get("error")
    assert result["solved"] and result["solve_step"] <= 4096
    # From launch includes the interpreter start and imports, so it is longer than the training time.
    assert result["solve_since_launch"] > result["solve_train_seconds"] > 0
    assert result["series"][-1][2] >= 5.0


def test_contender_failure_is_reported_not_raised(tmp_path):
    result = run.run_in_fresh_process(
        "ours_throughput",
        {
            "config_path": str(tmp_path / "missing.yaml"),
            "settings": run.zoo_settings(),
            "env_name": "cartpole",
            "total_steps": 256,
        },
        threads=1,
        timeout=120,
    )
    assert "missing.yaml" in result["error"] and "does not exist" in result["error"]


def test_unknown_section_names_the_choices(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--only", "throughput,speed"])
    message = capsys.readouterr().err
    assert "unknown section(s) speed" in message and "ceiling" in message


def test_report_keeps_every_figure_when_matplotlib_is_missing(tmp_path, monkeypatch, capsys):
    import sys

    from benchmarks import report

    monkeypatch.setitem(sys.modules, "benchmarks.plots", None)  # import fails as when not installed
    results = {
        "command": "python -m benchmarks",
        "machine": {"cores": 2},
        "scaling": [{"num_envs": 16, "steps_per_second": 1234.0}],
    }
    written = report.write_report(results, tmp_path)

    assert [path.name for path in written] == ["results.json", "results.md"]
    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert "plots skipped" in capsys.readouterr().out


@pytest.fixture
def torch_threads_restored():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the benchmark sets one thread for the learner


def test_pool_benchmark_measures_every_vectoriser_and_splits_the_phases(tmp_path, capsys, torch_threads_restored):
    """benchmarks/pool.py on a minuscule budget: the raw and PPO tables hold a figure for each
    vectoriser asked for (SlowEnv also as a share of its physical limit), `--quick` measures what
    the goals compare and nothing else, in its rounds, and `--phases` splits each PPO run into
    collect / learn for ours and SB3, with SB3's time over ours."""
    from benchmarks import pool

    out = tmp_path / "pool.json"
    assert (
        pool.main(["--quick", "--envs", "4", "--seconds", "0.2", "--rollouts", "1", "--repeat", "2", "--out", str(out)])
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert {(row["measure"], row["env"], row["kind"]) for row in rows} == {
        ("raw", "slow", "pool"),
        ("raw", "slow", "gym_async"),
        ("ppo", "cartpole", "pool"),
        ("ppo", "cartpole", "sb3_dummy"),
    }
    assert sorted(row["round"] for row in rows if row["kind"] == "sb3_dummy") == [0, 1]
    assert "**The goals**" in capsys.readouterr().out

    assert (
        pool.main(
            [
                "--games",
                "slow",
                "--envs",
                "4",
                "--seconds",
                "0.2",
                "--rollouts",
                "1",
                "--kinds",
                "pool",
                "sync",
                "gym_async",
                "sb3_dummy",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert {(row["measure"], row["kind"]) for row in rows} == {
        ("raw", "pool"),
        ("raw", "sync"),
        ("raw", "gym_async"),
        ("ppo", "pool"),
        ("ppo", "sync"),
        ("ppo", "gym_async"),
        ("ppo", "sb3_dummy"),
    }
    assert all(row["steps_per_second"] > 0 and row["limit"] > 0 for row in rows)
    printed = capsys.readouterr().out
    pool_rows = [line for line in printed.splitlines() if line.startswith("| slow | 4 | ours: pool |")]
    assert len(pool_rows) == 2 and all(line.endswith("% |") for line in pool_rows)  # raw and PPO, share of the limit
    assert "**The goals**" in printed

    assert (
        pool.main(
            [
                "--phases",
                "--games",
                "cartpole",
                "--envs",
                "4",
                "--rollouts",
                "1",
                "--kinds",
                "sync",
                "sb3_dummy",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    phases = json.loads((tmp_path / "pool_phases.json").read_text())["rows"]
    assert {row["kind"] for row in phases} == {"sync", "sb3_dummy"}
    assert all(row["collect"] > 0 and row["learn"] > 0 for row in phases)
    table = capsys.readouterr().out.split("Where the time goes")[1]
    ours = next(line for line in table.splitlines() if "ours: sync" in line)
    assert ours.count("x |") == 3  # SB3 / ours for collect, learn and in all


def test_pool_benchmark_goal_verdicts_take_each_ratio_within_its_round():
    """The verdict table: each goal's median over rounds, every ratio against the peer measured
    in the same round, "met" only at or above the goal, and a size with no figures says so."""
    from benchmarks import pool

    def row(measure, env, num_envs, kind, rate, round_=0):
        return {
            "measure": measure,
            "env": env,
            "num_envs": num_envs,
            "kind": kind,
            "round": round_,
            "steps_per_second": rate,
            "limit": 1000.0,
        }

    rows = [
        row("raw", "slow", 32, "pool", 850.0),
        row("raw", "slow", 32, "gym_async", 500.0),
        row("raw", "slow", 64, "pool", 700.0),
        row("raw", "slow", 64, "gym_async", 600.0),
    ]
    # PPO at 32 envs: ours 3.5x and 2.5x SB3 in rounds 0 and 1 (by the round's own peer), 4x in round 2
    for round_, (ours, sb3) in enumerate([(350.0, 100.0), (500.0, 200.0), (400.0, 100.0)]):
        rows += [row("ppo", "cartpole", 32, "pool", ours, round_), row("ppo", "cartpole", 32, "sb3_dummy", sb3, round_)]
    lines = pool.goals_markdown({"rows": rows}).splitlines()
    share, versus_async, versus_sb3 = (
        next(line for line in lines if line.startswith(f"| {goal[0]} |")) for goal in pool.GOALS
    )
    assert share.endswith("| 85%: met | 70%: not met |")
    assert versus_async.endswith("| 1.70: met | 1.17: not met |")
    assert versus_sb3.endswith("| 3.50 [2.50-4.00]: met | not measured |")


def test_run_start_benchmark_times_both_start_methods_from_a_real_start(capsys):
    """benchmarks/run_start.py, one round: each start method's two runs reach their first update,
    each timed from start(), and the table gives a figure per method."""
    from benchmarks import run_start

    assert run_start.main(["--rounds", "1"]) == 0
    printed = capsys.readouterr().out
    for method in run_start.METHODS:
        row = next(line for line in printed.splitlines() if line.startswith(f"| {method} |"))
        seconds = [float(cell.split(" s")[0]) for cell in row.strip("|").split("|")[1:]]
        assert len(seconds) == 2 and all(value > 0 for value in seconds)
