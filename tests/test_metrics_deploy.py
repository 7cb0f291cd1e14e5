"""deploy/: the Grafana dashboard and the alert rules ask only for metrics the project exports
(trainer/serving/metrics_export.py), the compose stack mounts files that exist, and the compose
Prometheus config is valid."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trainer.config.safe_yaml import load_yaml_file
from trainer.serving.metrics_export import exported_names

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}
PROMETHEUS_OWN = {"up"}  # written by Prometheus itself for every target


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (functions, keywords, labels, numbers left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    expr = re.sub(r"\$\w+", "", expr)  # Grafana variables
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word, rest = match.group(0), expr[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana/dashboards/rlstudio.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [
        variable["query"]["query"].replace("label_values(", "").split(",")[0]
        for variable in dashboard["templating"]["list"]
    ]
    return exprs


def alert_exprs() -> list[str]:
    rules = load_yaml_file(DEPLOY / "prometheus/alerts.yml")
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_the_name_check_finds_names_and_skips_the_rest():
    assert metric_names('rate(rlstudio_env_steps_total{run_id=~"$run"}[1m]) > 0 and on(run_id) up') == {
        "rlstudio_env_steps_total",
        "up",
    }
    assert metric_names("rlstudio_nope_total / 2") == {"rlstudio_nope_total"}


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_query_names_only_exported_metrics(source):
    exprs = dashboard_exprs() if source == "dashboard" else alert_exprs()
    assert exprs
    for expr in exprs:
        unknown = metric_names(expr) - exported_names() - PROMETHEUS_OWN
        assert not unknown, (
            f"{expr!r} asks for {sorted(unknown)}, which trainer/serving/metrics_export.py does not export"
        )


def test_every_dashboard_panel_plots_exported_metrics_and_the_guide_gets_its_panels():
    """Parsed, panel by panel: each panel has queries, each query selects at least one series, and
    every series it selects is one the exporter exports (a name merely appearing somewhere in the
    JSON, or a longer name that contains it, is not a panel for it)."""
    dashboard = json.loads((DEPLOY / "grafana/dashboards/rlstudio.json").read_text())
    exported = exported_names()
    plotted: dict[str, set[str]] = {}
    for panel in dashboard["panels"]:
        title = panel["title"]
        exprs = [target["expr"] for target in panel.get("targets", [])]
        assert exprs, f"panel {title!r} has no query"
        for expr in exprs:
            names = metric_names(expr)
            assert names, f"panel {title!r}: {expr!r} selects no series"
            unknown = names - exported
            assert not unknown, f"panel {title!r}: {expr!r} asks for {sorted(unknown)}, which is not exported"
            for name in names:
                plotted.setdefault(name, set()).add(title)
    promised = {
        "rlstudio_recent_episode_return_mean",
        "rlstudio_recent_episode_score_mean",
        "rlstudio_policy_loss",
        "rlstudio_value_loss",
        "rlstudio_entropy",
        "rlstudio_env_steps_total",
        "rlstudio_process_cpu_seconds_total",
        "rlstudio_gpu_utilization_ratio",
    }
    assert promised <= exported, f"the guide promises {sorted(promised - exported)}, which are not exported"
    missing = sorted(promised - plotted.keys())
    assert not missing, f"the dashboard has no panel for {missing}"


def test_the_compose_stack_mounts_files_that_exist_and_provisions_the_dashboard():
    compose = load_yaml_file(DEPLOY / "docker-compose.yml")
    assert {"studio", "prometheus", "grafana"} <= set(compose["services"])
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"docker-compose.yml mounts {source}, which is not in deploy/"
    provider = load_yaml_file(DEPLOY / "grafana/provisioning/dashboards/rlstudio.yml")["providers"][0]
    mounts = dict(volume.split(":")[:2] for volume in compose["services"]["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    source = load_yaml_file(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"][0]
    dashboard = json.loads((DEPLOY / "grafana/dashboards/rlstudio.json").read_text())
    assert {panel["datasource"]["uid"] for panel in dashboard["panels"]} == {source["uid"]}


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (Debian/Ubuntu: apt-get install -y prometheus)"
)
def test_the_compose_prometheus_config_is_valid(tmp_path):
    (tmp_path / "password").write_text("x")
    shutil.copy(DEPLOY / "prometheus/alerts.yml", tmp_path / "alerts.yml")
    text = (DEPLOY / "prometheus/prometheus.yml").read_text()
    text = text.replace("/etc/prometheus/alerts.yml", str(tmp_path / "alerts.yml"))
    text = text.replace("/run/secrets/studio_password", str(tmp_path / "password"))
    (tmp_path / "prometheus.yml").write_text(text)
    result = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_lists_every_exported_metric():
    text = (DEPLOY.parent / "docs/operations.md").read_text()
    missing = [name for name in sorted(exported_names()) if f"`{name}`" not in text]
    assert not missing, f"docs/operations.md does not list {missing}"
