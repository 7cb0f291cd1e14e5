"""A real Prometheus (Debian's `prometheus` binary) scrapes a running trainer's --metrics-port,
with its --metrics-key as `authorization: {credentials: ...}`: its HTTP API shows the run's step
counter rising, and the alert rules load."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from metrics_helpers import cartpole_cli
from test_studio_helpers import free_port

REPO = Path(__file__).resolve().parent.parent
KEY = "scrape-key-1"
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (Debian/Ubuntu: apt-get install -y prometheus)"
)


def api(url: str, path: str, **params) -> dict:
    query = f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(query, timeout=10) as response:
        return json.loads(response.read())


def test_prometheus_sees_the_trainers_step_counter_rise(tmp_path):
    trainer_port, prometheus_port = free_port(), free_port()
    (tmp_path / "alerts.yml").write_text((REPO / "deploy/prometheus/alerts.yml").read_text())
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n"
        f"  - job_name: rlstudio-trainer\n    authorization: {{credentials: {KEY}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{trainer_port}']}}]\n"
    )
    trainer = subprocess.Popen(
        cartpole_cli(
            str(tmp_path / "runs"),
            "--set",
            "total_timesteps=5000000",
            "--set",
            "num_envs=8",
            "--set",
            "gif_interval=0",
            "--quiet",
            "--metrics-port",
            str(trainer_port),
            "--metrics-key",
            KEY,
        ),  # Prometheus sends it as a bearer token
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    prometheus = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "wb"),
    )
    url = f"http://127.0.0.1:{prometheus_port}"
    try:
        seen: list[float] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (len(seen) < 2 or seen[-1] <= seen[0]):
            time.sleep(1)
            try:
                result = api(url, "query", query="rlstudio_env_steps_total")["data"]["result"]
            except OSError:
                continue
            if result:
                assert result[0]["metric"]["job"] == "rlstudio-trainer"
                assert result[0]["metric"]["env"] == "cartpole" and result[0]["metric"]["run_id"]
                seen.append(float(result[0]["value"][1]))
        assert len(seen) >= 2 and seen[-1] > seen[0], (seen, (tmp_path / "prometheus.log").read_text()[-2000:])
        rules = api(url, "rules")["data"]["groups"]
        assert {rule["name"] for group in rules for rule in group["rules"]} >= {
            "RLStudioReturnFalling",
            "RLStudioTrainerDown",
        }
        assert all(rule["health"] != "err" for group in rules for rule in group["rules"])
    finally:
        trainer.terminate()
        prometheus.terminate()
        trainer.wait(timeout=60)
        prometheus.wait(timeout=60)
