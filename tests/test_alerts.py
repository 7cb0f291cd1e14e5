"""deploy/prometheus/alerts.yml: every rule is checked by promtool and has a unit test
(deploy/prometheus/alerts_test.yml) that shows it firing, and staying quiet, on made-up series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trainer.config.safe_yaml import load_yaml_file

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian/Ubuntu: apt-get install -y prometheus)"
)


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=DEPLOY, capture_output=True, text=True, timeout=120)


def alert_names() -> list[str]:
    rules = load_yaml_file(DEPLOY / "alerts.yml")
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


@needs_promtool
def test_rules_are_valid_prometheus_rules():
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(alert_names())} rules found" in result.stdout


@needs_promtool
def test_every_rule_passes_its_promtool_unit_test():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_unit_test():
    tests = load_yaml_file(DEPLOY / "alerts_test.yml")["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case.get("exp_alerts")}
    assert set(alert_names()) == fired, "every rule in alerts.yml needs a test case in alerts_test.yml where it fires"
    assert {
        "RLStudioReturnFalling",
        "RLStudioRunStalled",
        "RLStudioTrainerDown",
        "RLStudioCheckpointOld",
        "RLStudioLossNotFinite",
        "RLStudioRunsDiskAlmostFull",
    } <= set(alert_names())


@needs_promtool
def test_a_broken_rule_fails_its_unit_test(tmp_path):
    """The unit tests can fail: the return alert with a threshold off by one is caught."""
    text = (
        (DEPLOY / "alerts.yml")
        .read_text()
        .replace(
            "rlstudio_return_falling_updates >= rlstudio_return_falling_threshold",
            "rlstudio_return_falling_updates > rlstudio_return_falling_threshold",
        )
    )
    (tmp_path / "alerts.yml").write_text(text)
    shutil.copy(DEPLOY / "alerts_test.yml", tmp_path / "alerts_test.yml")
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "RLStudioReturnFalling" in result.stdout + result.stderr
