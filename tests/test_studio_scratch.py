"""What a studio writes outside run folders stays in its own scratch folder: ONNX exports from
the Watch tab and Gradio's uploads (private to that studio, removed when it exits), and an upload
over `--max-upload-size` is refused with a message saying the limit and the flag."""

from __future__ import annotations

import json
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from test_studio_helpers import start_studio
from test_watch import TINY as WATCH_TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {**WATCH_TINY, "seed": 3}


def handler(demo, name: str):
    """The function a button of the page calls (the studio's own wiring, as a click runs it)."""
    return next(block_fn.fn for block_fn in demo.fns.values() if getattr(block_fn, "name", None) == name)


def test_onnx_exports_go_into_each_studios_own_scratch_folder(tmp_path, monkeypatch):
    pytest.importorskip("onnx", reason="optional extra: pip install -r requirements-export.txt")
    from studio.runs import RunManager
    from studio.scratch import ScratchFolder
    from studio.ui import build_app
    from studio.uploads import keep_uploads_in
    from trainer.config.validation import config_from_dict
    from trainer.run.layout import create_run_dir
    from trainer.run.loop import train

    run_dir = create_run_dir(config_from_dict(TINY), tmp_path / "runs")
    train(config_from_dict(TINY), run_dir)
    studios, exported = [], []
    try:
        for _ in range(2):  # one studio at a time, as in its own process (GRADIO_TEMP_DIR is per process)
            scratch = ScratchFolder()
            monkeypatch.setenv("GRADIO_TEMP_DIR", "")
            keep_uploads_in(scratch)  # as studio.ui.launch does
            demo = build_app(RunManager(tmp_path / "runs"), scratch=scratch)
            studios.append(demo)
            button, message = handler(demo, "on_export")(run_dir.name)
            onnx = list(scratch.path.glob("onnx/*.onnx"))
            assert len(onnx) == 1 and f"Exported **{onnx[0].name}**" in message, message
            assert Path(button.value["path"]).is_relative_to(scratch.path)  # Gradio's copy for the download too
            assert stat.S_IMODE(scratch.path.stat().st_mode) == 0o700  # no other user can read or replace it
            exported.append(onnx[0])
        assert exported[0].parent != exported[1].parent, "two studios share their exports folder"
        assert not Path("/tmp/rl-studio-onnx", exported[0].name).exists()
    finally:
        for demo in studios:
            demo.studio.manager.shutdown()
            demo.studio.scratch.cleanup()
    assert not any(path.exists() for path in exported), "a studio's exports outlived it"


def upload(url: str, files: dict[str, bytes]) -> tuple[int, object]:
    """POST files to Gradio's upload route, as the page's upload buttons do."""
    boundary = "----rlstudio-upload"
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n".encode()
            + data
            + b"\r\n"
            for name, data in files.items()
        )
        + f"--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "/gradio_api/upload", data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_uploads_stay_in_the_studios_scratch_folder_and_are_bounded(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"  # the studios' temp folder (TMPDIR), so that what they leave behind can be seen
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    servers = [
        start_studio(tmp_path / "runs", tmp_path / f"studio{i}.log", "--max-upload-size", "1mb") for i in range(2)
    ]
    try:
        kept = []
        for server in servers:
            status, paths = upload(server.url, {"config.yaml": b"num_envs: 4\n"})
            assert status == 200, paths
            path = Path(paths[0])
            scratch = path.relative_to(temp).parts[0]
            assert scratch.startswith("rl-studio-") and path.read_bytes() == b"num_envs: 4\n"
            assert stat.S_IMODE((temp / scratch).stat().st_mode) == 0o700
            kept.append(path)
        assert kept[0].relative_to(temp).parts[0] != kept[1].relative_to(temp).parts[0], "two studios share uploads"

        status, message = upload(servers[0].url, {"model.pth": b"x" * (2 * 2**20)})
        assert status == 413 and "at most 1 MB per upload" in message and "--max-upload-size" in message
        # Many files, each under the limit, in one request: the request is what is bounded.
        status, message = upload(servers[0].url, {f"part{i}.pth": b"x" * (600 * 1024) for i in range(4)})
        assert status == 413 and "at most 1 MB" in message
    finally:
        for server in servers:
            server.stop()
    assert not any(path.exists() for path in kept), "uploads outlived their studio"
    left = [entry.name for entry in temp.iterdir() if entry.name.startswith(("rl-studio-", "gradio"))]
    assert left == [], f"the studios left {left} in the temp folder"


def test_the_upload_folder_is_bounded_as_a_whole_the_oldest_uploads_make_room(tmp_path):
    """Uploads at the per-request limit cannot fill the disk: past FOLDER_UPLOADS uploads' worth
    the oldest (over a minute old) are removed, and when only fresh ones remain the next is refused."""
    import os
    import time

    from studio.uploads import IN_USE_SECONDS, make_room

    folder = tmp_path / "gradio"
    (folder / "a").mkdir(parents=True)
    now = time.time()
    for index in range(4):
        path = folder / "a" / f"upload{index}.pth"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (now - 3600 + index, now - 3600 + index))  # an hour old, oldest first
    assert make_room(folder, 1500, 3000, now)  # 1500 fits once 3 of the 4 went
    assert sorted(p.name for p in (folder / "a").iterdir()) == ["upload3.pth"]  # oldest first
    fresh = folder / "a" / "fresh.pth"
    fresh.write_bytes(b"x" * 2900)
    assert not make_room(folder, 1000, 3000, time.time())  # only a fresh one left: refused
    assert fresh.exists() and time.time() - fresh.stat().st_mtime < IN_USE_SECONDS
