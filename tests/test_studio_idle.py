"""An idle studio does next to no work, and the live view's picture says how old it is.

No page polls while no run trains (the Train tab's timer is off, and turns itself off when its
run ends); Gradio's queue looks for events every 50 ms instead of every millisecond; the caption
under the rollout GIF states its age while the run trains. Measured: `python -m benchmarks --only
studio_latency` (idle CPU, cold start, Start to first picture).
"""

from __future__ import annotations

import gradio as gr

from studio.callbacks import Studio
from studio.run_view import rollout_caption_html
from studio.runs import RunManager
from studio.snapshot import GifInfo
from studio.ui import QUEUE_IDLE_SECONDS, quiet_when_idle
from test_studio_runs import CONFIG, fake_trainer, wait_for


def test_gradios_queue_looks_for_events_at_a_quiet_pace():
    with gr.Blocks() as demo:
        gr.Markdown("idle")
    demo.queue()
    assert demo._queue.sleep_when_free < QUEUE_IDLE_SECONDS  # Gradio's own pace: the reason for this
    quiet_when_idle(demo)
    assert demo._queue.sleep_when_free >= QUEUE_IDLE_SECONDS
    assert demo._queue.progress_update_sleep_when_free >= QUEUE_IDLE_SECONDS


def test_a_page_opened_with_no_run_starts_no_timer(tmp_path):
    studio = Studio(RunManager(tmp_path / "runs"))
    run_box, timer, *_ = studio.on_load()
    assert timer == gr.skip() and run_box == gr.skip()  # the Train tab's timer stays off


def test_the_live_view_stops_polling_when_its_run_has_ended(tmp_path):
    manager = RunManager(tmp_path / "runs", target=fake_trainer)
    run_id = manager.start(CONFIG).run_id
    wait_for(lambda: manager.get(run_id).status == "finished")
    studio = Studio(manager)
    outputs = studio.on_tick(run_id, {}, "score", 0.0, False, "steps")
    timer = outputs[-2]
    assert isinstance(timer, gr.Timer) and timer.active is False
    manager.shutdown()


def test_the_caption_says_how_old_the_picture_is_while_the_run_trains(tmp_path):
    manager = RunManager(tmp_path / "runs", target=fake_trainer)
    run_id = manager.start(CONFIG).run_id
    wait_for(lambda: manager.get(run_id).status == "finished")
    finished = manager.get(run_id)
    manager.shutdown()
    gif = GifInfo("x.gif", 12_288, 10.0, 1.0, recorded_at=1000.0)
    training = type("Training", (), {"is_active": True, "config": finished.config})()
    assert "Rollout at step 12,288, recorded 4 s ago" in rollout_caption_html(gif, training, now=1004.2)
    # A run that has ended is no longer compared with the picture: no age.
    assert "recorded" not in rollout_caption_html(gif, finished, now=1004.2)
    assert "first GIF" in rollout_caption_html(None, None)
