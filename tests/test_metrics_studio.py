"""The studio's side of monitoring: GET /metrics on the real Gradio server for every run it
knows, and the warnings (banner, log line) for a falling return or a non-finite loss."""

from __future__ import annotations

import base64
import math
import urllib.error
import urllib.request

import gradio as gr
from prometheus_client.parser import text_string_to_metric_families

from metrics_helpers import write_run
from studio import views
from studio.metrics import metrics_route
from studio.runs import RunManager
from studio.ui import launch_options
from studio.warnings import log_with_warnings, troubles, warning_banner
from test_studio_helpers import free_port


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def serve(manager: RunManager, auth, tmp_path) -> tuple[gr.Blocks, str]:
    """The studio's launch path (studio.ui.launch): launch_options plus the metrics route."""
    port = free_port()
    with gr.Blocks() as demo:
        gr.Markdown("studio")
    options = launch_options("127.0.0.1", port, auth, [str(tmp_path)], "1mb")
    options["app_kwargs"]["routes"] = [metrics_route(manager, auth)]
    demo.launch(prevent_thread_lock=True, **options)
    return demo, f"http://127.0.0.1:{port}"


def test_studio_metrics_list_every_run_with_its_labels_and_status(tmp_path):
    write_run(tmp_path, "cartpole-a", [1.0, 2.0, 3.0], end="finished")
    write_run(
        tmp_path,
        "snake-b",
        [5.0, 4.0, 3.0],
        env_name="snake",
        model_type="ppo-cnn",
        losses={3: {"policy_loss": None}},
        end="failed",
    )
    manager = RunManager(tmp_path)
    demo, url = serve(manager, None, tmp_path)
    try:
        status, text = get(url + "/metrics")
    finally:
        demo.close()
        manager.shutdown()
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, sample.labels.get("run_id"), sample.labels.get("status"))] = sample
    steps = found[("rlstudio_env_steps_total", "snake-b", None)]
    assert steps.value == 3 * 512 and steps.labels == {
        "run_id": "snake-b",
        "env": "snake",
        "model": "ppo-cnn",
        "rank": "0",
    }
    assert found[("rlstudio_env_steps_total", "cartpole-a", None)].labels["model"] == "ppo-small"
    assert found[("rlstudio_run_status", "cartpole-a", "finished")].value == 1
    assert found[("rlstudio_run_status", "snake-b", "failed")].value == 1
    assert found[("rlstudio_return_falling_updates", "snake-b", None)].value == 2
    assert found[("rlstudio_nonfinite_losses", "snake-b", None)].value == 1
    assert math.isnan(found[("rlstudio_policy_loss", "snake-b", None)].value)
    assert found[("rlstudio_runs_disk_free_bytes", None, None)].value > 0


def test_with_auth_metrics_need_the_same_user_and_password(tmp_path):
    write_run(tmp_path, "cartpole-a", [1.0])
    manager = RunManager(tmp_path)
    demo, url = serve(manager, ("alice", "s3cret"), tmp_path)
    try:
        assert get(url + "/metrics")[0] == 401
        assert get(url + "/metrics", ("alice", "wrong"))[0] == 401
        status, text = get(url + "/metrics", ("alice", "s3cret"))
    finally:
        demo.close()
        manager.shutdown()
    assert status == 200 and 'run_id="cartpole-a"' in text


def snapshot(tmp_path, returns, **kwargs):
    run_id = f"cartpole-{len(list(tmp_path.iterdir()))}"
    write_run(tmp_path, run_id, returns, **kwargs)
    manager = RunManager(tmp_path)
    try:
        return manager.get(run_id)
    finally:
        manager.shutdown()


def test_a_return_falling_for_n_updates_shows_a_banner_and_one_log_line(tmp_path):
    falling = [float(20 - i) for i in range(12)]  # 11 consecutive drops, threshold 10
    run = snapshot(tmp_path, falling)
    assert "fallen for 10 consecutive updates" in views.status_html(run)
    lines = [f"[STEP {512 * i}] EpRewMean: {value}" for i, value in enumerate(falling, start=1)]
    logged = log_with_warnings(lines, run)
    warnings = [line for line in logged if "warning" in line]
    assert warnings == ["[STEP 5632] warning: the mean return has fallen for 10 consecutive updates (now 10.0)"]
    assert logged.index(warnings[0]) == logged.index("[STEP 5632] EpRewMean: 10.0") + 1
    # polling again (or in another tab) shows the same single line, not another one
    assert log_with_warnings(lines, run) == logged


def test_nine_drops_do_not_warn_and_the_count_is_the_runs_setting(tmp_path):
    nine = [float(20 - i) for i in range(10)]
    assert troubles(snapshot(tmp_path, nine)) == []
    assert "fallen for 4 consecutive" in warning_banner(snapshot(tmp_path, nine[:5], warn_falling_updates=4))


def test_after_recovery_the_banner_goes_and_a_new_fall_is_a_new_episode(tmp_path):
    down = [float(20 - i) for i in range(11)]
    run = snapshot(tmp_path, down + [30.0] + [float(29 - i) for i in range(10)] + [40.0])
    episodes = troubles(run)
    assert [trouble.kind for trouble in episodes] == ["return_falling", "return_falling"]
    assert warning_banner(run) == ""  # recovered at the latest update
    assert not any(trouble.ongoing for trouble in episodes)


def test_a_non_finite_loss_warns_once_per_episode(tmp_path):
    bad = {"policy_loss": None}
    run = snapshot(tmp_path, [1.0, 2.0, 3.0, 4.0, 5.0], losses={2: bad, 3: bad, 5: bad})
    episodes = troubles(run)
    assert [(trouble.kind, trouble.step) for trouble in episodes] == [
        ("loss_not_finite", 1024),
        ("loss_not_finite", 2560),
    ]
    assert "policy_loss not finite" in views.status_html(run)
    assert [trouble.ongoing for trouble in episodes] == [False, True]
