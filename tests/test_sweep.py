"""Hyperparameter sweeps (`python -m trainer sweep`, trainer/sweep/): a small study on CartPole
prunes and writes a best.yaml the trainer loads, a killed sweep continues with no trial lost or run
twice, bad sweep files are refused with messages that name the key, and two workers share one
PostgreSQL study."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from trainer.config.checks import ConfigError  # noqa: E402
from trainer.config.defaults import load_config  # noqa: E402
from trainer.run.events import read_events  # noqa: E402
from trainer.run.layout import best_config_path, events_path, study_path, sweep_folder, trials_folder  # noqa: E402
from trainer.sweep import study as book  # noqa: E402
from trainer.sweep.objective import TrialCurve  # noqa: E402
from trainer.sweep.space import read_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = """base: cartpole.yaml
objective: {metric: recent_score_mean, direction: maximize}
budget: {total_timesteps: TIMESTEPS}
space:
  learning_rate: {low: 1.0e-5, high: 1.0e-1, log: true}
  num_envs: {choices: [16]}
EXTRApruner: PRUNER
sampler: {name: tpe, seed: 0}
"""
PRUNE_EARLY = "{name: median, startup_trials: 2, warmup_reports: 0, reports: 8}"


def sweep_file(folder: Path, name: str, timesteps: int = 4096, pruner: str = PRUNE_EARLY, extra: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        TINY.replace("TIMESTEPS", str(timesteps)).replace("PRUNER", pruner).replace("EXTRA", extra), encoding="utf-8"
    )
    return path


def sweep_command(space: Path, runs: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "trainer", "sweep", "--space", str(space), "--runs-dir", str(runs), *flags]


def run_sweep(space: Path, runs: Path, *flags: str, timeout: int = 100) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        sweep_command(space, runs, *flags), cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def load_study(url: str, name: str):
    return optuna.load_study(study_name=name, storage=book.open_storage(url))


def load_trials(url: str, name: str) -> list:
    return load_study(url, name).get_trials(deepcopy=False)


def end_status(run_dir: Path) -> str | None:
    ends = [event for event in read_events(events_path(run_dir)) if event["type"] == "end"]
    return ends[-1]["status"] if ends else None


def test_a_small_sweep_prunes_and_writes_a_best_config_the_trainer_loads(tmp_path):
    runs = tmp_path / "runs"
    result = run_sweep(sweep_file(tmp_path, "tiny"), runs, "--trials", "6", "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    folder = sweep_folder(runs, "tiny")
    lines = result.stdout.strip().splitlines()
    assert Path(lines[-1]).resolve() == best_config_path(folder).resolve(), lines[-3:]
    config = load_config(lines[-1])  # as `python -m trainer --config best.yaml` reads it
    assert config.total_timesteps == 4096 and config.num_envs == 16

    trials = load_trials(f"sqlite:///{study_path(folder)}", "tiny")
    pruned = [trial for trial in trials if trial.state == optuna.trial.TrialState.PRUNED]
    assert len(trials) == 6 and pruned, [trial.state for trial in trials]
    assert sum("pruned at step" in line for line in lines) == len(pruned)
    assert (
        abs(config.learning_rate - load_study(f"sqlite:///{study_path(folder)}", "tiny").best_params["learning_rate"])
        < 1e-12
    )
    # every trial is a normal run folder; a pruned one stopped cleanly (within an update of the decision)
    run_dirs = sorted(trials_folder(folder).iterdir())
    assert len(run_dirs) == 6
    statuses = [end_status(folder / trial.user_attrs["run_dirs"][0]) for trial in pruned]
    assert "stopped" in statuses and set(statuses) <= {"stopped", "finished"}, statuses


def test_a_sampled_config_that_does_not_hold_together_is_a_failed_trial_not_a_crash(tmp_path):
    extra = "  mini_batch_size: {choices: [1000]}\n"  # does not divide 16 envs x 32 steps
    result = run_sweep(sweep_file(tmp_path, "broken", extra=extra), tmp_path / "runs", "--trials", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("the sampled config is invalid") == 2, result.stdout
    assert "mini_batch_size" in result.stdout and "no best config" in result.stderr


def test_with_several_seeds_the_objective_is_the_mean_of_the_seeds_runs(tmp_path):
    runs = tmp_path / "runs"
    result = run_sweep(sweep_file(tmp_path, "seeds", pruner="none"), runs, "--trials", "2", "--seeds", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    folder = sweep_folder(runs, "seeds")
    for trial in load_trials(f"sqlite:///{study_path(folder)}", "seeds"):
        assert trial.user_attrs["run_dirs"] == [f"trials/{trial.number:04d}-seed1", f"trials/{trial.number:04d}-seed2"]
        finals = [
            [event for event in read_events(events_path(folder / path)) if event["type"] == "metrics"][-1]
            for path in trial.user_attrs["run_dirs"]
        ]
        assert [event["step"] for event in finals] == [4096, 4096]
        assert trial.value == pytest.approx(sum(event["recent_score_mean"] for event in finals) / 2)


def test_a_killed_sweep_continues_with_no_trial_lost_or_run_twice(tmp_path):
    runs, space = tmp_path / "runs", sweep_file(tmp_path, "killed", timesteps=30_000, pruner="none")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "first.txt"
    with open(log, "w") as output:
        process = subprocess.Popen(
            sweep_command(space, runs, "--trials", "5", "--jobs", "2"), cwd=ROOT, stdout=output, stderr=output, env=env
        )
        deadline = time.monotonic() + 60
        while "trial 2 started" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert "trial 2 started" in log.read_text(), log.read_text()

    result = run_sweep(space, runs, "--trials", "5", "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    folder = sweep_folder(runs, "killed")
    trials = load_trials(f"sqlite:///{study_path(folder)}", "killed")
    interrupted = [trial for trial in trials if book.INTERRUPTED in trial.system_attrs]
    kept = book.counted(trials)
    assert interrupted, "no trial was running when the sweep was killed"
    assert len(kept) == 5 and all(trial.state == optuna.trial.TrialState.COMPLETE for trial in kept)
    # each interrupted trial was requeued exactly once, and its copy resumed the same run folder
    for trial in interrupted:
        copies = [other for other in kept if other.user_attrs.get("retry_of") == trial.number]
        assert len(copies) == 1
        if trial.params:  # (none when it was killed before it drew them: its copy draws its own)
            assert copies[0].params == trial.params
        if "run_dirs" in trial.user_attrs:  # (none when it was killed before it named them)
            assert copies[0].user_attrs["run_dirs"] == trial.user_attrs["run_dirs"]
    used = [path for trial in kept for path in trial.user_attrs["run_dirs"]]
    assert len(set(used)) == 5 and sorted(path.name for path in trials_folder(folder).iterdir()) == sorted(
        Path(path).name for path in used
    )
    assert all(end_status(folder / path) == "finished" for path in used)


BAD_SWEEPS = [
    (
        "space:\n  learnin_rate: {low: 0.001, high: 0.01}\n",
        ["unknown config key 'learnin_rate'", "Did you mean 'learning_rate'?"],
    ),
    ("space:\n  gamma: {low: 0.9, high: 1.5}\n", ["space.gamma: high 1.5 is outside", "gamma must be in [0.0, 1.0]"]),
    (
        "space:\n  num_envs: {low: 0, high: 64}\n",
        ["space.num_envs: low 0 is outside", "num_envs must be a positive integer"],
    ),
    ("space:\n  model_type: {choices: [ppo-small, gpt-4]}\n", ["space.model_type: the choice 'gpt-4' is refused"]),
    ("space:\n  anneal_lr: {low: 0, high: 1}\n", ["anneal_lr is not a number", "choices"]),
    ("space:\n  buffer_size: {choices: [1000]}\n", ["algo ppo (the base's) does not take buffer_size"]),
    (
        "objective: {metric: recent_scor_mean, direction: maximize}\n",
        ["objective.metric 'recent_scor_mean'", "Did you mean 'recent_score_mean'?"],
    ),
    (
        "objective: {metric: recent_score_mean, direction: maximise}\n",
        ["objective.direction must be maximize or minimize", "Did you mean 'maximize'?"],
    ),
    ("objective: {metric: recent_score_mean, direction: maximize}\n", ["space: give the keys to tune"]),
    ("spaces:\n  gamma: {low: 0.9, high: 0.99}\n", ["unknown section 'spaces'", "Did you mean 'space'?"]),
    (
        "space:\n  gamma: {low: 0.9, high: 0.99}\npruner: {name: medain}\n",
        ["pruner must be one of median, hyperband, none", "Did you mean 'median'?"],
    ),
]


@pytest.mark.parametrize(
    "text, expected",
    BAD_SWEEPS,
    ids=[
        "unknown-key",
        "range-outside-bounds",
        "integer-below-minimum",
        "bad-choice",
        "range-on-a-switch",
        "other-algorithms-key",
        "bad-metric",
        "bad-direction",
        "missing-space",
        "unknown-section",
        "bad-pruner",
    ],
)
def test_a_bad_sweep_file_is_refused_with_a_message_that_names_the_key(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text("base: cartpole.yaml\n" + text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_sweep(path)
    for words in expected:
        assert words in str(error.value), str(error.value)


def test_the_example_sweep_file_reads_as_written():
    sweep = read_sweep(ROOT / "examples" / "sweep_cartpole.yaml")
    assert [param.name for param in sweep.params] == ["learning_rate", "num_envs", "gae_lambda"]
    assert sweep.params[0].log and sweep.params[1].choices == (32, 64, 128) and not sweep.params[2].integer
    assert sweep.config.total_timesteps == 200_000 and sweep.objective.direction == "maximize"
    trial = sweep.trial_config({"learning_rate": 1e-3, "num_envs": 64, "gae_lambda": 0.9})
    assert (trial.num_envs, trial.batch_size, trial.env_name) == (64, 64 * 32, "cartpole")


def test_the_cli_reports_a_bad_sweep_file_before_any_folder_exists(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("base: cartpole.yaml\nspace:\n  learnin_rate: {low: 0.001, high: 0.01}\n", encoding="utf-8")
    result = run_sweep(path, tmp_path / "runs")
    assert result.returncode == 2 and "Did you mean 'learning_rate'?" in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_study_continues_only_with_the_sweep_it_was_started_from(tmp_path):
    storage = book.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    book.open_study(read_sweep(sweep_file(tmp_path, "first")), "study", storage, seeds=1)
    book.open_study(read_sweep(sweep_file(tmp_path, "first")), "study", storage, seeds=1)  # the same: continues
    other = read_sweep(sweep_file(tmp_path, "other", timesteps=8192))
    with pytest.raises(book.StudyError, match="started from another sweep .*base"):
        book.open_study(other, "study", storage, seeds=1)
    with pytest.raises(book.StudyError, match="seeds"):
        book.open_study(read_sweep(sweep_file(tmp_path, "first")), "study", storage, seeds=2)


# ---------------------------------------------------------------------------------------------
# PostgreSQL: two sweep workers on one study


def _postgres_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


@pytest.fixture
def postgres_url():
    """A throwaway PostgreSQL server in a temporary folder (as the postgres user when run as root)."""
    initdb, pg_ctl = _postgres_binary("initdb"), _postgres_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: apt-get install -y postgresql")
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is None:
        pytest.skip("no PostgreSQL driver: python -m pip install 'psycopg[binary]'")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        as_user = ["runuser", "-u", "postgres", "--"]
    folder = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
    if as_user:
        shutil.chown(folder, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = folder / "data"
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-U", "sweep", "--auth", "trust"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-o", options, "-w", "-l", str(folder / "log"), "start"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        yield f"postgresql://sweep@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def test_two_workers_share_one_postgresql_study_and_no_trial_runs_twice(tmp_path, postgres_url):
    space, runs = sweep_file(tmp_path, "shared", pruner="none"), tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = ("--trials", "4", "--storage", postgres_url)
    workers = [
        subprocess.Popen(
            sweep_command(space, runs, *flags),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=100)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    assert all(output.strip().splitlines()[-1].endswith("best.yaml") for output in outputs)
    trials = book.counted(load_trials(postgres_url, "shared"))
    assert len(trials) == 4 and all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)
    started = [line.split()[1] for output in outputs for line in output.splitlines() if " started" in line]
    assert sorted(started, key=int) == [str(trial.number) for trial in trials]  # each trial started once, by one worker
    assert all(started.count(number) == 1 for number in started)
    assert len(list(trials_folder(sweep_folder(runs, "shared")).iterdir())) == 4


def test_mean_mode_is_the_area_under_the_reported_curve():
    # Two seeds, 4 report points over 400 steps: point k once both seeds passed step 100 k.
    curve = TrialCurve(seeds=2, total_timesteps=400, reports=4)
    for step, values in ((100, (1.0, 3.0)), (300, (5.0, 7.0)), (400, (9.0, 11.0))):
        for seed, value in enumerate(values):
            curve.add(seed, step, value)
    assert curve.reported == {1: 2.0, 3: 6.0, 4: 10.0}  # point 2 skipped by the update at 300
    # Point 2 holds the value reported before it: (2 + 2 + 6 + 10) / 4.
    assert curve.value("mean", "maximize") == 5.0
    assert curve.value("best", "maximize") == 10.0
    assert curve.value("final", "maximize") == 10.0
    # A faster learner with the same final value scores higher on the mean.
    fast = TrialCurve(seeds=1, total_timesteps=400, reports=4)
    for step in (100, 200, 300, 400):
        fast.add(0, step, 10.0)
    assert fast.value("mean", "maximize") > curve.value("mean", "maximize")


def test_an_unknown_mode_names_the_three_modes(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "base: configs/cartpole.yaml\nobjective: {metric: recent_score_mean, direction: maximize, mode: fastest}\n"
        "space:\n  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\n"
    )
    with pytest.raises(ConfigError) as caught:
        read_sweep(path)
    assert "objective.mode must be final" in str(caught.value) and "mean" in str(caught.value)
