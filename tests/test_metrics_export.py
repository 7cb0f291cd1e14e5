"""trainer/serving/metrics_export.py: what Prometheus reads from a trainer (names, values, labels), and
the one definition of "the return fell for N updates" and "a loss is not finite"."""

from __future__ import annotations

import math
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from metrics_helpers import cartpole_cli, metrics_event
from test_studio_helpers import free_port
from trainer.run.events import make_event
from trainer.serving.metrics_export import (
    METRICS,
    MetricsSink,
    RunsCollector,
    exported_names,
    falling_streak,
    falling_streaks,
    parse_gpu_csv,
)

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
    sink(
        make_event(
            "start", run_id="snake-1", config=config, device="cpu", total_timesteps=10**6, resumed_from_step=None
        )
    )
    for update, value in enumerate(returns, start=1):
        sink(metrics_event(update, value, **(losses if update == len(returns) else {})))
    return sink


def test_falling_streak_counts_consecutive_drops_and_skips_updates_without_episodes():
    assert falling_streak([]) == 0
    assert falling_streak([5, 4, 3, 2]) == 3
    assert falling_streak([5, 4, 6, 5]) == 1  # a rise breaks the streak
    assert falling_streak([5, 4, None, 3]) == 2  # no episode ended: neither breaks nor extends
    assert falling_streak([5, 5, 5]) == 0  # flat is not falling
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
    assert found["rlstudio_process_resident_memory_bytes"][0].value > 10 * 2**20  # this very process
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


def test_every_metric_the_registry_exports_has_a_series_and_nothing_else_is_exported(tmp_path):
    """trainer/config/metrics.py is what Prometheus shows: in a full scrape each metric it exports,
    derived ones included, has a sample under its declared name, type and help."""
    from trainer.config.metrics import BY_NAME, PROMETHEUS_PREFIX, REGISTRY, prometheus_help

    # every optional metric in the last event: PPO's come from METRIC_DEFAULTS, the replay and
    # actor-learner algorithms' here
    replay = {"q_value_mean": 5.0, "td_error_mean": 0.5, "epsilon": 0.1, "alpha": 0.2, "buffer_size": 1000}
    actor_learner = {"policy_lag": 2, "queue_depth": 1, "dropped_batches": 3, "actors": 2}
    sink = fed_sink([3.0, 2.0], recent_length_mean=20.0, recent_score_mean=1.0, **replay, **actor_learner)
    sink(make_event("checkpoint", step=1024, path="ckpt_1024.pth"))
    registry = CollectorRegistry()
    registry.register(RunsCollector(lambda: [sink.sample()], tmp_path, gpus=lambda: [("0", 0.5, 1.0, 2.0)]))
    families = {family.name: family for family in text_string_to_metric_families(generate_latest(registry).decode())}
    declared = {metric.prometheus.name.removesuffix("_total"): metric for metric in REGISTRY if metric.prometheus}
    assert set(families) == {PROMETHEUS_PREFIX + name for name in declared}
    for name, metric in declared.items():
        family = families[PROMETHEUS_PREFIX + name]
        assert family.samples, f"{family.name} is declared but has no series"
        assert (family.type, family.documentation) == (metric.prometheus.type, prometheus_help(metric)), name
    for name, value in {**replay, **actor_learner}.items():  # the event's value, under the exported name
        exported = families[PROMETHEUS_PREFIX + BY_NAME[name].prometheus.name.removesuffix("_total")]
        assert [sample.value for sample in exported.samples] == [value], name


def test_metric_names_follow_prometheus_conventions():
    for name, (kind, _, help_text) in METRICS.items():
        assert name.endswith("_total") == (kind == "counter"), name
        assert help_text.endswith("."), name


def test_the_cli_serves_metrics_on_metrics_port_while_training(tmp_path):
    port = free_port()
    command = cartpole_cli(
        str(tmp_path),
        "--set",
        "total_timesteps=2000000",
        "--set",
        "num_envs=8",
        "--set",
        "gif_interval=0",
        "--metrics-port",
        str(port),
        "--quiet",
    )  # no --metrics-host: the default, this machine only
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
        result = subprocess.run(
            cartpole_cli(
                str(tmp_path),
                "--set",
                "total_timesteps=1000",
                "--metrics-port",
                str(port),
                "--metrics-host",
                "127.0.0.1",
            ),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert f"--metrics-port {port}" in result.stderr and "pick a free port" in result.stderr


# ---------------------------------------------------------------------------------------------
# Who may scrape a trainer: this machine only, unless a key is set (trainer/serving/bind.py)


def scrape_status(url: str, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_trainers_metrics_listen_on_this_machine_only_by_default():
    from trainer.__main__ import build_train_parser
    from trainer.serving.metrics_server import serve_trainer_metrics

    assert build_train_parser().parse_args(["--metrics-port", "9109"]).metrics_host == "127.0.0.1"
    _, server = serve_trainer_metrics(0)
    try:
        assert server.server.socket.getsockname()[0] == "127.0.0.1"
        assert scrape_status(f"http://127.0.0.1:{server.address[1]}/metrics")[0] == 200  # no key needed there
    finally:
        server.close()


def test_loopback_is_this_machine_and_nothing_else():
    from trainer.serving.bind import is_loopback

    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.5", "example.com", "localhost.evil.com"]))


def test_a_public_metrics_host_without_a_key_is_refused_before_anything_starts(tmp_path, monkeypatch):
    import pytest

    from trainer.serving.bind import PublicBindError
    from trainer.serving.metrics_server import serve_trainer_metrics

    with pytest.raises(PublicBindError, match="--metrics-key"):
        serve_trainer_metrics(0, "0.0.0.0")
    monkeypatch.delenv("RL_STUDIO_METRICS_KEY", raising=False)
    result = subprocess.run(
        cartpole_cli(str(tmp_path / "runs"), "--metrics-port", str(free_port()), "--metrics-host", "0.0.0.0"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--metrics-host 0.0.0.0" in result.stderr and "--metrics-key KEY" in result.stderr
    assert "RL_STUDIO_METRICS_KEY" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "a refused start made a run folder"


def test_with_a_key_a_scrape_needs_it_as_a_bearer_token():
    from trainer.serving.metrics_server import serve_trainer_metrics

    sink, server = serve_trainer_metrics(0, "127.0.0.1", key="s3cret-key")
    sink(
        make_event(
            "start",
            run_id="keyed-1",
            config={"env_name": "cartpole"},
            device="cpu",
            total_timesteps=1000,
            resumed_from_step=None,
        )
    )
    url = f"http://127.0.0.1:{server.address[1]}/metrics"
    try:
        status, body = scrape_status(url)
        assert status == 401 and "Authorization: Bearer KEY" in body
        assert scrape_status(url, {"Authorization": "Bearer wrong"})[0] == 401
        assert scrape_status(url, {"Authorization": "Basic czNjcmV0LWtleQ=="})[0] == 401
        status, body = scrape_status(url, {"Authorization": "Bearer s3cret-key"})
        assert status == 200 and 'run_id="keyed-1"' in body
    finally:
        server.close()
