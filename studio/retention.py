"""The Runs tab's *Delete old checkpoints*: frees disk space in a run that is not training.

Everything but the newest checkpoint (resume continues from it) and the best one (best.json)
goes, by the trainer's own retention rule (trainer.run.retention.checkpoints_to_delete with K = 1).
Two clicks: the first says how many files and MiB would go and what stays, the second deletes.
The manager refuses while the run's trainer lives (this studio's child or owner.json's process).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from studio.runs import ACTIVE_STATUSES, RunError, RunManager
from trainer.run.layout import checkpoint_folder, list_checkpoints
from trainer.run.retention import checkpoints_to_delete, read_best_checkpoint


def cleanup_preview(manager: RunManager, run_id: str | None) -> tuple[str, bool]:
    """What *Delete old checkpoints* would do to `run_id`, and whether there is anything to do."""
    try:
        run = manager.get(run_id) if run_id else None
    except RunError as error:
        return f"**{error}**", False
    if run is None:
        return "**Pick a run first.**", False
    if run.status in ACTIVE_STATUSES:
        return f"**Run {run_id} is {run.status}; stop it before deleting its old checkpoints.**", False
    folder = checkpoint_folder(run.run_dir, run.config or None)
    doomed = checkpoints_to_delete(folder, keep=1, keep_best=True)
    if not doomed:
        return f"Run **{run_id}** has no old checkpoints: only the newest and the best are left.", False
    size = sum(path.stat().st_size for path in doomed if path.is_file()) / 2**20
    newest = list_checkpoints(folder)[-1][0]
    best = read_best_checkpoint(folder)
    kept = f"the newest (step {newest:,})" + (
        f" and the best (step {best.step:,}, return {best.recent_return_mean:.2f})"
        if best and best.step != newest
        else ""
    )
    return (
        f"Delete {len(doomed)} old checkpoint(s) of **{run_id}** ({size:.1f} MiB), keeping {kept}? "
        f"Click *Confirm delete old checkpoints*."
    ), True


def on_cleanup_request(manager: RunManager, run_id: str | None):
    message, possible = cleanup_preview(manager, run_id)
    return message, gr.Button(visible=possible)


def on_cleanup_confirm(manager: RunManager, run_id: str | None):
    try:
        deleted = manager.delete_old_checkpoints(run_id or "")
    except RunError as error:
        return f"**{error}**", gr.Button(visible=False)
    return f"Deleted {len(deleted)} old checkpoint(s) of **{run_id}**.", gr.Button(visible=False)


@dataclass
class CleanupButtons:
    request: gr.Button
    confirm: gr.Button


def build_cleanup_buttons() -> CleanupButtons:
    """The two buttons, placed where this is called (the Runs tab's row of run actions)."""
    return CleanupButtons(
        request=gr.Button("Delete old checkpoints", scale=1, elem_id="delete-old-checkpoints"),
        confirm=gr.Button(
            "Confirm delete old checkpoints",
            variant="stop",
            visible=False,
            scale=1,
            elem_id="confirm-delete-old-checkpoints",
        ),
    )


def wire_cleanup_buttons(
    buttons: CleanupButtons,
    manager: RunManager,
    run_picker: gr.Dropdown,
    runs_message: gr.Markdown,
    refresh: Any,
    refresh_inputs: Sequence[Any],
    refresh_outputs: Sequence[Any],
    **options: Any,
) -> None:
    """Request -> confirmation text; Confirm -> delete, then `refresh` the runs table (its sizes)."""
    buttons.request.click(
        lambda run_id: on_cleanup_request(manager, run_id), run_picker, [runs_message, buttons.confirm], **options
    )
    buttons.confirm.click(
        lambda run_id: on_cleanup_confirm(manager, run_id), run_picker, [runs_message, buttons.confirm], **options
    ).then(refresh, list(refresh_inputs), list(refresh_outputs), **options)
