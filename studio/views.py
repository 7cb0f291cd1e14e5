"""What the page shows about a run, as plain values: status line, table rows, captions, CSV.

Pure functions of a `RunSnapshot` (no gradio), so they are tested directly and shared by the
Train tab, the Runs tab and the API.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from studio.runs import GifInfo, RunSnapshot
from studio.score import format_count, format_number, game_score
from studio.warnings import log_with_warnings, troubles, warning_banner
from trainer.config.metrics import csv_columns
from trainer.run.events import clip_caption
from trainer.run.files import atomic_write
from trainer.run.layout import events_path, log_path, metrics_csv_path
from trainer.run.retention import run_size_bytes

METRIC_COLUMNS = csv_columns()  # metrics.csv's columns: the metric registry, trainer/config/metrics.py
# The Runs table's columns, the key ones first (a phone shows the first two, the rest scroll
# sideways), each with its width in px: wide enough for its header's words and its values.
RUNS_TABLE_COLUMNS = (
    ("run", 200),
    ("status", 100),
    ("score", 150),
    ("steps", 70),
    ("name", 130),
    ("env", 110),
    ("model", 100),
    ("best return", 85),
    ("last return", 85),
    ("wall time", 80),
    ("disk (MiB)", 85),
)
RUNS_TABLE_HEADERS = [header for header, _ in RUNS_TABLE_COLUMNS]
RUNS_TABLE_WIDTHS = [width for _, width in RUNS_TABLE_COLUMNS]
STATUS_LABELS = {
    "queued": "queued",  # shown with its place in line: RunSnapshot.status_text
    "starting": "starting…",
    "running": "training",
    "stopping": "stopping… (saving the model)",
    "finished": "finished",
    "stopped": "stopped",
    "failed": "failed",
    "interrupted": "interrupted",
}


def format_duration(seconds: float | None) -> str:
    """12.3 -> '0:12', 3725 -> '1:02:05'."""
    if seconds is None or seconds != seconds:
        return "–"
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_html(run: RunSnapshot | None) -> str:
    """The status line: state, step / total, speed, elapsed, ETA, a progress bar, and errors."""
    if run is None:
        return (
            '<div class="run-status idle"><span class="badge idle">no run</span>'
            "Pick a game and a model in the form, then press <b>Start</b>.</div>"
        )
    score = game_score(run.config.get("env_name"))
    total = f" / {_count_html(run.total_timesteps)}" if run.total_timesteps else ""
    facts = [
        f"step <b>{_count_html(run.step)}</b>{total}",
        f"{format_number(run.fps, 0)} steps/s" if run.fps else None,
        f"elapsed {format_duration(run.wall_seconds)}",
        f"ETA {format_duration(run.eta_seconds)}" if run.eta_seconds is not None else None,
        f"on {html.escape(run.device)}" if run.device else None,
    ]
    # The game score first, in the game's unit; the shaped return after it (for an env whose
    # score is the return, the return alone).
    score_value = run.last_value(score.recent_key, score.key)
    if score.is_return:
        headline = f"return <b>{format_number(score_value)}</b>" if score_value is not None else None
    else:
        headline = f"<b>{html.escape(score.text(score_value))}</b>" if score_value is not None else None
        if run.last_return is not None:
            facts.insert(0, f"return {format_number(run.last_return)}")
    label = run.status_text if run.queue_place else STATUS_LABELS.get(run.status, run.status)
    parts = [
        f'<div class="run-status {html.escape(run.status)}">',
        f'<div class="status-row"><span class="badge {html.escape(run.status)}">{html.escape(label)}</span>',
        f'<span class="run-title">{html.escape(run.name)}</span>' if run.name else "",
        f'<span class="run-name">{html.escape(run.run_id)}</span>',
        f'<span class="run-score" title="mean of the last 100 episodes">{headline}</span>' if headline else "",
        f'<span class="facts">{" · ".join(fact for fact in facts if fact)}</span></div>',
        f'<div class="progress"><div class="progress-fill" style="width:{run.progress * 100:.1f}%"></div></div>',
    ]
    if run.error_message:
        parts.append(f'<div class="run-error">{html.escape(run.error_message)}</div>')
    if run.error_traceback:
        parts.append(f'<pre class="run-traceback">{html.escape(run.error_traceback)}</pre>')
    parts.append(warning_banner(run))  # studio/warnings.py: falling return, non-finite losses
    parts.append("</div>")
    return "".join(parts)


def _count_html(count: int) -> str:
    """A step count at a glance ("2.01M"), the exact number on hover."""
    return f'<span title="{count:,}">{format_count(count)}</span>'


def score_cell(run: RunSnapshot) -> str:
    """The Runs table's score: "52.3 pipes", "return -985.2", or "–" before the first episode."""
    score = game_score(run.config.get("env_name"))
    return score.text(run.last_value(score.recent_key, score.key))


def runs_table_rows(runs: Sequence[RunSnapshot]) -> list[list]:
    """One row per run, in RUNS_TABLE_HEADERS order."""
    return [
        [
            run.run_id,
            run.status_text,
            score_cell(run),
            run.step,
            run.name,
            run.env_name,
            run.model_type,
            _rounded(run.best_return),
            _rounded(run.last_return),
            format_duration(run.wall_seconds),
            round(run_size_bytes(run.run_dir, run.config or None) / 2**20, 2),  # a number: the column sorts
        ]
        for run in runs
    ]


def runs_table(rows: Sequence[list]):
    """The Runs table's value: `rows` (from runs_table_rows, perhaps filtered or sorted) as a
    pandas Styler that shows step counts as "2.01M" and returns as "1,020" while the cells keep
    the exact numbers, so the columns still sort as numbers (gr.Dataframe shows a Styler's text)."""
    import pandas as pd

    frame = pd.DataFrame([list(row) for row in rows], columns=RUNS_TABLE_HEADERS)
    return frame.style.format(
        {
            "steps": format_count,
            "best return": format_number,
            "last return": format_number,
            "disk (MiB)": "{:.2f}".format,
        },
        na_rep="–",
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def gif_caption(gif: GifInfo | None, env_name: str | None = None) -> str:
    """The line under the rollout GIF (never on it: the game draws its own score there): the step
    it was taken at and what it shows of its episode, in trainer/run/events.py `clip_caption`'s words,
    the score in the game's unit (none for a Gymnasium env: its score is the return)."""
    if gif is None:
        return "Rollout: the first GIF comes right after the first update."
    score = game_score(env_name)
    shown = clip_caption(
        gif.steps_shown,
        gif.episode_steps,
        gif.episode_ended,
        gif.episode_return,
        None if score.is_return else gif.episode_score,
        score.unit,
    )
    return f"Rollout at step {gif.step:,}" + (f": {shown}" if shown else "")


def gif_caption_html(gif: GifInfo | None, env_name: str | None = None) -> str:
    return f'<div class="gif-caption">{html.escape(gif_caption(gif, env_name))}</div>'


def log_text(run: RunSnapshot, lines: int = 80, max_bytes: int = 32_000) -> str:
    """The last lines of the run's train.log (the trainer's own log), else of its log events."""
    path = log_path(run.run_dir)
    try:
        with open(path, "rb") as log_file:
            log_file.seek(max(0, path.stat().st_size - max_bytes))
            text = log_file.read().decode("utf-8", errors="replace")
    except OSError:
        return "\n".join(log_with_warnings(run.log_tail[-lines:], run))
    # Paths inside the run folder are shown relative to it: shorter lines, same information.
    text = text.replace(str(Path(run.run_dir).resolve()) + os.sep, "").replace(str(run.run_dir) + os.sep, "")
    return "\n".join(log_with_warnings(text.splitlines()[-lines:], run))


def log_html(text: str) -> str:
    """The log in a box that stays scrolled to its newest line (column-reverse keeps the bottom)."""
    body = html.escape(text) if text else "The trainer's log appears here."
    return f'<div class="log-title">Training log</div><div class="log-box"><pre>{body}</pre></div>'


def log_identity(run: RunSnapshot) -> tuple:
    """Changes whenever `log_text` would."""
    try:
        stat = log_path(run.run_dir).stat()
    except OSError:
        return (run.run_id, run.log_count, len(troubles(run)))
    return (run.run_id, stat.st_size, stat.st_mtime_ns, len(troubles(run)))  # a new warning is a new log line


def batch_note(num_envs: object, num_steps: object, mini_batch_size: object, total_timesteps: object = None) -> str:
    """What num_envs, num_steps, mini_batch_size and total_timesteps add up to, under the form,
    with thousands separators (the number boxes show `20000000`)."""
    try:
        envs, steps = int(num_envs), int(num_steps)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "batch per update = num_envs × num_steps"
    batch = envs * steps
    note = f"batch per update = {envs:,} × {steps:,} = **{batch:,}** samples"
    try:
        mini = int(mini_batch_size)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        mini = 0
    if mini > 0 and batch % mini == 0:
        note += f", {batch // mini} minibatches of {mini:,}"
    elif mini > 0:
        note += f" — mini_batch_size {mini:,} does not divide it"
    try:
        total = int(total_timesteps)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return note
    if total > 0 and batch > 0:
        updates = -(-total // batch)  # whole updates, as trainer/run/loop.py counts them
        note += f"  \ntotal_timesteps **{total:,}** = {updates:,} updates"
        if updates * batch != total:
            note += f" ({updates * batch:,} steps: whole updates)"
    return note


def warning_lines(warnings: Sequence[str]) -> str:
    """Markdown paragraphs, one "⚠ ..." per warning, each shown as the text it is."""
    return "".join(f"\n\n⚠ {markdown_text(warning)}" for warning in warnings)


def markdown_text(text: str) -> str:
    """`text` for a Markdown box, shown as written: a `*name`, `~x` or an `_x_` between words is
    no emphasis, a `<...>` no tag. Code spans (backticks), lists and underscores inside words
    (`num_envs`) stay: they show as meant."""
    escaped = re.sub(r"[*~]|(?<!\w)_|_(?!\w)", lambda match: "\\" + match.group(0), str(text))
    return escaped.replace("<", "&lt;").replace(">", "&gt;")


def write_metrics_csv(run: RunSnapshot) -> str:
    """Write `<run_dir>/metrics.csv` (atomically) from every metrics event in metrics.jsonl (the
    studio's in-memory curve is downsampled); streamed, so a long run's file is never held whole."""

    def write(file) -> None:
        text = io.TextIOWrapper(file, encoding="utf-8", newline="")
        writer = csv.DictWriter(text, fieldnames=METRIC_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        try:
            with open(events_path(run.run_dir), encoding="utf-8", errors="replace") as events:
                for line in events:
                    if '"metrics"' not in line:  # cheap filter before parsing
                        continue
                    try:
                        event = json.loads(line)
                    except json.JSONDecodeError:  # a torn last line
                        continue
                    if isinstance(event, dict) and event.get("type") == "metrics":
                        writer.writerow(
                            {key: "" if event.get(key) is None else event.get(key) for key in METRIC_COLUMNS}
                        )
        except OSError:
            pass  # no metrics.jsonl yet: the header alone
        text.flush()
        text.detach()  # atomic_write flushes and closes the binary file itself

    return str(atomic_write(metrics_csv_path(run.run_dir), write))


def run_summary(run: RunSnapshot) -> dict:
    """The run as plain JSON, for the /poll API."""
    last_metrics = run.metrics[-1] if run.metrics else None
    score = game_score(run.config.get("env_name"))
    return {
        "run_id": run.run_id,
        "status": run.status,
        "env_name": run.env_name,
        "model_type": run.model_type,
        "device": run.device,
        "step": run.step,
        "total_timesteps": run.total_timesteps,
        "progress": round(run.progress, 4),
        "fps": run.fps,
        "elapsed_seconds": round(run.wall_seconds, 2),
        "eta_seconds": None if run.eta_seconds is None else round(run.eta_seconds, 1),
        "last_return": run.last_return,
        "best_return": run.best_return,
        "last_score": run.last_value(score.recent_key, score.key),
        "score_unit": score.unit,  # "pipes"; None: the score is the return
        "updates": run.update_count,
        "last_metrics": last_metrics,
        "latest_gif_step": run.latest_gif.step if run.latest_gif else None,
        "final_model": Path(run.final_model).name if run.final_model else None,
        "error": run.error_message,
        "traceback_tail": run.error_traceback,
        "log_tail": run.log_tail[-20:],
    }
