"""trainer/metrics_export.py: what Prometheus reads from a trainer (names, values, labels), and
the one definition of "the return fell for N updates" and "a loss is not finite"."""
from __future__ import annotations

import math
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from metrics_helpers import metrics_event
from test_studio_helpers import free_port
from trainer.events import make_event
from trainer.metrics_export import (METRICS, MetricsSink, RunsCollector, exported_names, falling_streak,
                                    falling_streaks, parse_gpu_csv)

REPO = Path(__file__).resolve().parent.parent


def samples(text: str) -> dict[str, list]:
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def scrape(sink: MetricsSink, runs_dir=None, gpus=lambda: []) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(RunsCollector(lambda: [sink.sample()], runs_dir, gpus=gpus))
    return samples(generate_latest(registry).decode())


def fed_sink(returns, **losses) -> MetricsSink:
    sink = MetricsSink()
    config = {"env_name": "snake", "model_type": "ppo-cnn", "warn_falling_updates": 3}
    sink(make_event("start", run_id="snake-1", config=config, device="cpu", total_timesteps=10**6,
                    resumed_from_step=None))
    for update, value in enumerate(returns, start=1):
        sink(metrics_event(update, value, **(losses if update == len(returns) else {})))
    return sink


def test_falling_streak_counts_consecutive_drops_and_skips_updates_without_episodes():
    assert falling_streak([]) == 0
    assert falling_streak([5, 4, 3, 2]) == 3
    assert falling_streak([5, 4, 6, 5]) == 1          # a rise breaks the streak
    assert falling_streak([5, 4, None, 3]) == 2       # no episode ended: neither breaks nor extends
    assert falling_streak([5, 5, 5]) == 0             # flat is not falling
    assert falling_streaks([3, 2, 1, 2]) == [0, 1, 2, 0]


def test_a_trainer_exports_its_run_with_prometheus_names_and_labels(tmp_path):
    found = scrape(fed_sink([10.0, 9.0, 8.0, 7.0]), runs_dir=tmp_path)
    labels = {"run_id": "snake-1", "env": "snake", "model": "ppo-cnn", "rank": "0"}  # not distributed: rank 0
    steps = found["rlstudio_env_steps_total"][0]
    assert steps.labels == labels and steps.value == 4 * 512
    assert found["rlstudio_updates_total"][0].value == 4
    assert found["rlstudio_recent_episode_return_mean"][0].value == 7.0
    assert found["rlstudio_return_falling_updates"][0].value == 3
    assert found["rlstudio_return_falling_threshold"][0].value == 3
    assert found["rlstudio_nonfinite_losses"][0].value == 0
    running = {sample.labels["status"]: sample.value for sample in found["rlstudio_run_status"]}
    assert running["running"] == 1 and sum(running.values()) == 1
    assert found["rlstudio_process_resident_memory_bytes"][0].value > 10 * 2**20   # this very process
    assert found["rlstudio_runs_disk_size_bytes"][0].value >= found["rlstudio_runs_disk_free_bytes"][0].value > 0
    assert set(found) <= exported_names() | {"rlstudio_runs_disk_free_bytes"}


def test_a_nan_loss_is_exported_as_nan_and_counted():
    found = scrape(fed_sink([1.0, 2.0], policy_loss=math.nan, value_loss=math.inf))
    assert math.isnan(found["rlstudio_policy_loss"][0].value)
    assert math.isnan(found["rlstudio_value_loss"][0].value)
    assert found["rlstudio_nonfinite_losses"][0].value == 2


def test_the_end_of_a_run_is_its_status_and_a_checkpoint_resets_its_age():
    sink = fed_sink([1.0])
    assert scrape(sink)["rlstudio_checkpoint_age_seconds"][0].value >= 0
    sink(make_event("checkpoint", step=512, path="ckpt_512.pth"))
    assert scrape(sink)["rlstudio_checkpoint_age_seconds"][0].value < 5
    sink(make_event("end", status="finished", step=512, final_model=None))
    statuses = {sample.labels["status"]: sample.value for sample in scrape(sink)["rlstudio_run_status"]}
    assert statuses["finished"] == 1 and statuses["running"] == 0


def test_gpu_numbers_per_gpu_in_base_units():
    rows = parse_gpu_csv("0, 87, 1024, 81920\n1, [N/A], 10, 100\n")
    assert rows == [("0", 0.87, 1024 * 2**20, 81920 * 2**20)]
    found = scrape(fed_sink([1.0]), gpus=lambda: rows)
    assert found["rlstudio_gpu_utilization_ratio"][0].labels == {"gpu": "0"}
    assert found["rlstudio_gpu_memory_used_bytes"][0].value == 2**30


def test_metric_names_follow_prometheus_conventions():
    for name, (kind, _, help_text) in METRICS.items():
        assert name.endswith("_total") == (kind == "counter"), name
        assert help_text.endswith("."), name


def test_the_cli_serves_metrics_on_metrics_port_while_training(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "trainer", "-c", "configs/cartpole.yaml", "--runs-dir", str(tmp_path),
               "--set", "total_timesteps=2000000", "--set", "num_envs=8", "--set", "gif_interval=0",
               "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--quiet"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        steps = []
        deadline = time.monotonic() + 120
        while len(steps) < 2 and time.monotonic() < deadline and process.poll() is None:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                time.sleep(0.5)
                continue
            found = samples(text).get("rlstudio_env_steps_total")
            if found and (not steps or found[0].value > steps[-1]):
                steps.append(found[0].value)
            time.sleep(0.5)
        assert len(steps) == 2 and steps[1] > steps[0] > 0, (steps, process.poll())
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()[-2000:]


def test_a_busy_metrics_port_is_a_clear_usage_error(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "trainer", "-c", "configs/cartpole.yaml", "--runs-dir",
                                 str(tmp_path), "--set", "total_timesteps=1000", "--metrics-port", str(port),
                                 "--metrics-host", "127.0.0.1"], cwd=REPO, capture_output=True, text=True,
                                timeout=120)
    assert result.returncode == 2
    assert f"--metrics-port {port}" in result.stderr and "pick a free port" in result.stderr
