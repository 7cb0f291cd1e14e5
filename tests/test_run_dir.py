"""The run layout (trainer/run/layout.py and its neighbours files.py, owner.py, status.py): the
documented folder, no run-folder path built by hand anywhere else, atomic writes of every run
file, the owner file, the status rule, and a CLI run with its own checkpoint.path in the studio."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import trainer.run.files as files_module
import trainer.run.layout as layout_module
from trainer.run.files import remove_stale_temporaries
from trainer.run.layout import LAYOUT, checkpoint_folder, latest_checkpoint_path, layout_markdown
from trainer.run.owner import RunOwnedError, RunOwner, live_owner, take_ownership
from trainer.run.status import run_status

ROOT = Path(__file__).resolve().parents[1]
LAYOUT_MARKER = "<!-- run directory: generated from trainer/run/layout.py -->"


def test_the_docs_draw_the_layout_in_code():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("### Run directory") : text.index("### Events (the schema")]
    block = section[section.index("runs/<run_id>/") :]
    block = block[: block.index("```")]
    documented = [line.split()[0] for line in block.splitlines()[1:] if line.strip()]
    assert sorted(documented) == sorted(LAYOUT)


def test_every_page_that_shows_the_run_directory_generates_it_from_the_layout():
    """The trainer's page (and the README, while it has the section) show LAYOUT's table, every
    entry: python docs/build.py writes it after the marker."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    holding = [page for page in pages if LAYOUT_MARKER in page.read_text(encoding="utf-8")]
    assert ROOT / "docs" / "trainer.md" in holding
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if page.name != "architecture.md" and re.search(r"^#+ Run directory\s*$", text, re.MULTILINE):
            assert page in holding, f"{page.name} shows the run directory by hand: put {LAYOUT_MARKER} there"
    for page in holding:
        assert f"{LAYOUT_MARKER}\n{layout_markdown()}\n" in page.read_text(encoding="utf-8"), (
            f"{page.name}: the run directory table is stale: run python docs/build.py"
        )
    assert all(f"`{entry}`" in layout_markdown() for entry in LAYOUT)


# ---------------------------------------------------------------------------------------------
# No run-folder path built by hand: an AST scan of every module but the layout's

SCANNED = ("trainer", "studio", "envs", "benchmarks", "app.py")
LAYOUT_FILE = "trainer/run/layout.py"  # the one place that spells the names
WRITER_FILE = "trainer/run/files.py"  # atomic_write: the one os.replace
# (file, the flagged string) -> why it stays. Every entry must still be needed.
ALLOWED: dict[tuple[str, str], str] = {
    ("trainer/config/metrics.py", "metrics.jsonl"): "the metric table's prose names the file; trainer.config sits "
    "below trainer.run and cannot import the layout",
    ("benchmarks/pool.py", "rollouts"): "a setting of the pool benchmark (how many rollouts), not the folder",
}
HOLE = "\0"  # what an interpolated value ({x}, + x, / x) renders as


def _layout_names() -> tuple[set[str], list[re.Pattern], tuple[str, ...]]:
    """The plain names (files and folders), the patterns (`ckpt_<step>.pth`), and the tails that
    only a pattern's name ends with (`_final.pth`, not a bare `.pth`)."""
    plain, patterns, tails = set(), [], []
    for entry in LAYOUT:
        for part in entry.strip("/").split("/"):
            pieces = re.split(r"<[^>]+>", part)
            if len(pieces) == 1:
                plain.add(part)
                continue
            patterns.append(re.compile(".+".join(re.escape(piece) for piece in pieces)))
            if re.search(r"[A-Za-z]", pieces[-1].split(".")[0]):
                tails.append(pieces[-1])
    return plain, patterns, tuple(tails)


PLAIN, PATTERNS, TAILS = _layout_names()
LAYOUT_CONSTANTS = {
    name
    for name, value in vars(layout_module).items()
    if name.isupper() and isinstance(value, str) and (value in PLAIN or value in TAILS)
}
LAYOUT_FUNCTIONS = {
    name
    for name, value in vars(layout_module).items()
    if callable(value)
    and getattr(value, "__module__", None) == layout_module.__name__
    and (name.endswith(("_path", "_folder")) or name == "find_final_model")
}


def _render(node: ast.AST) -> str | None:
    """The string an expression builds (interpolated parts as HOLE), or None if it builds none."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(value.value if isinstance(value, ast.Constant) else HOLE for value in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        left, right = _render(node.left), _render(node.right)
        if left is None and right is None:
            return None
        return (
            (HOLE if left is None else left)
            + ("/" if isinstance(node.op, ast.Div) else "")
            + (HOLE if right is None else right)
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "ckpt_%d.pth" % step
        return _render(node.left)
    return None


def names_a_run_file(text: str) -> bool:
    """`text` is a run folder's entry, or a path ending in one (`x/metrics.jsonl`, `ckpt_*.pth`);
    a text with spaces is a message, not a path."""
    if any(character.isspace() for character in text):
        return False
    last = text.rstrip("/").split("/")[-1]
    return last in PLAIN or any(pattern.fullmatch(last) for pattern in PATTERNS) or text.endswith(TAILS)


def _call_name(call: ast.Call) -> str:
    function = call.func
    if isinstance(function, ast.Name):
        return function.id
    if isinstance(function, ast.Attribute):
        return (function.value.id + "." if isinstance(function.value, ast.Name) else ".") + function.attr
    return ""


def _targets_run_folder(node: ast.AST, tainted: set[str]) -> bool:
    """The expression names a run file: a literal, a layout constant or path function, or a
    variable that was set from one of those in the same function."""
    for part in ast.walk(node):
        text = _render(part)
        if text is not None and names_a_run_file(text):
            return True
        if isinstance(part, ast.Name) and (part.id in LAYOUT_CONSTANTS or part.id in tainted):
            return True
        if isinstance(part, ast.Attribute) and part.attr in LAYOUT_CONSTANTS:
            return True
        if isinstance(part, ast.Call) and _call_name(part).split(".")[-1] in LAYOUT_FUNCTIONS:
            return True
    return False


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a module or function, not those of the functions and classes inside it."""
    nodes, stack = [], list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack += ast.iter_child_nodes(node)
    return nodes


def _tainted_names(scope: ast.AST) -> set[str]:
    """Variables of `scope` assigned a run-folder path (to a fixed point: a = events_path(r); b = a)."""
    tainted: set[str] = set()
    while True:
        grown = set(tainted)
        for node in _scope_nodes(scope):
            if (
                isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
                and node.value is not None
                and _targets_run_folder(node.value, grown)
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                grown |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        if grown == tainted:
            return tainted
        tainted = grown


def _write_mode(call: ast.Call, position: int) -> str:
    mode = (
        call.args[position]
        if len(call.args) > position
        else next((keyword.value for keyword in call.keywords if keyword.arg == "mode"), None)
    )
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"


def _hand_written_writes(tree: ast.AST, relative: str) -> list[tuple[int, str]]:
    """Files replaced by anything but atomic_write, and run files written in place (appending,
    how metrics.jsonl and train.log grow, is fine)."""
    found = []
    scopes = [
        tree,
        *(
            node
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        ),
    ]
    for scope in scopes:
        tainted = _tainted_names(scope)
        for call in _scope_nodes(scope):
            if not isinstance(call, ast.Call):
                continue
            name = _call_name(call)
            method = name.split(".")[-1]
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            if relative != WRITER_FILE and (
                name in ("os.replace", "os.rename", "os.renames", "shutil.move")
                or method in ("replace", "rename")
                and len(call.args) == 1
                and not call.keywords
                and name != "dataclasses.replace"
            ):
                found.append(
                    (call.lineno, f"{name.lstrip('.')}(): only atomic_write (trainer/run/files.py) replaces files")
                )
            elif (
                name in ("shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree")
                and len(call.args) > 1
                and _targets_run_folder(call.args[1], tainted)
            ):
                found.append((call.lineno, f"{name}() into a run file: write it with atomic_write"))
            elif (
                name in ("open", "io.open")
                and call.args
                and set(_write_mode(call, 1)) & set("wx+")
                and _targets_run_folder(call.args[0], tainted)
            ):
                found.append((call.lineno, f"open(..., {_write_mode(call, 1)!r}) of a run file: use atomic_write"))
            elif (
                method in ("write_text", "write_bytes")
                and receiver is not None
                and _targets_run_folder(receiver, tainted)
            ):
                found.append((call.lineno, f".{method}() of a run file: use atomic_write"))
            elif (
                method == "open"
                and receiver is not None
                and set(_write_mode(call, 0)) & set("wx+")
                and _targets_run_folder(receiver, tainted)
            ):
                found.append((call.lineno, f".open({_write_mode(call, 0)!r}) of a run file: use atomic_write"))
    return found


def layout_violations(path: Path, relative: str) -> list[str]:
    """Every place in `path` that spells a run-folder name, or writes a run file, by hand."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[int, str] = {}
    if relative != LAYOUT_FILE:
        for node in ast.walk(tree):
            text = _render(node)
            if text is not None and names_a_run_file(text) and (relative, text) not in ALLOWED:
                found.setdefault(node.lineno, f"{text.replace(HOLE, '{}')!r}: use trainer.run.layout")
    for line, why in _hand_written_writes(tree, relative):
        found.setdefault(line, why)
    return [f"{relative}:{line}: {why}" for line, why in sorted(found.items())]


def _scanned_files() -> list[tuple[Path, str]]:
    paths = []
    for name in SCANNED:
        target = ROOT / name
        paths += [target] if target.is_file() else sorted(target.rglob("*.py"))
    return [(path, path.relative_to(ROOT).as_posix()) for path in paths if "__pycache__" not in path.parts]


def test_no_module_but_the_layout_builds_a_run_folder_path_by_hand():
    violations = [line for path, relative in _scanned_files() for line in layout_violations(path, relative)]
    assert violations == [], "run-folder paths built by hand:\n" + "\n".join(violations)
    texts = {relative: path.read_text(encoding="utf-8") for path, relative in _scanned_files()}
    stale = [key for key in ALLOWED if key[0] not in texts or key[1] not in texts[key[0]]]
    assert stale == [], f"allowed, but no longer there: {stale}"


PLANTED = {
    'events = run_dir / "metrics.jsonl"': "/metrics.jsonl'",
    'ckpt = folder / f"ckpt_{step}.pth"': "ckpt_{}.pth'",
    'best = run_dir / "checkpoints/best.json"': "/checkpoints/best.json'",
    'models = list(run_dir.glob("*_final.pth"))': "'*_final.pth'",
    'gif = run_dir / ROLLOUTS + "/step_" + str(step) + ".gif"': "step_{}.gif'",
    "source.replace(target)": "replace(): only atomic_write",
    "shutil.move(source, target)": "shutil.move(): only atomic_write",
    "os.rename(source, target)": "os.rename(): only atomic_write",
    'open(events_path(run_dir), "w").write(text)': "open(..., 'w') of a run file",
    "path = config_path(run_dir)\n    path.write_text(text)": ".write_text() of a run file",
    "shutil.copy(upload, log_path(run_dir))": "shutil.copy() into a run file",
    'notes_path(run_dir).open("wb")': ".open('wb') of a run file",
}


@pytest.mark.parametrize("line, said", PLANTED.items())
def test_the_scan_catches_a_planted_violation(tmp_path, line, said):
    planted = tmp_path / "planted.py"
    planted.write_text(f"def save(run_dir, folder, step, source, target, text, upload):\n    {line}\n")
    violations = layout_violations(planted, "studio/planted.py")
    assert len(violations) == 1 and said in violations[0], violations


def test_the_scan_lets_the_sanctioned_ways_pass(tmp_path):
    fine = tmp_path / "fine.py"
    fine.write_text(
        "def save(run_dir, text, step):\n"
        '    """Reads metrics.jsonl and train.log."""\n'
        "    atomic_write(events_path(run_dir), text)\n"
        '    open(log_path(run_dir), "a").write(text)       # the log grows by appending\n'
        '    text.replace("metrics", "steps")                # str.replace, not a rename\n'
        '    open(run_dir.parent / "report.json", "w")       # not a run file\n'
    )
    assert layout_violations(fine, "studio/fine.py") == []


def _writers(run: Path):
    """Each writer of a run file, with the file it writes."""
    import torch

    from studio import views
    from studio.history import RunState
    from trainer.run.checkpoint import atomic_save
    from trainer.run.events import trim_events_after
    from trainer.run.gif import write_gif
    from trainer.run.layout import write_config

    frames = [np.zeros((8, 8, 3), dtype=np.uint8)] * 2
    snapshot = RunState(run_id=run.name, run_dir=run, metrics=[{"step": 1}]).snapshot()
    return {
        "config.yaml": lambda: write_config(run, {"env_name": "cartpole"}),
        "checkpoints/ckpt_1.pth": lambda: atomic_save({"weights": torch.ones(3)}, run / "checkpoints" / "ckpt_1.pth"),
        "rollouts/step_1.gif": lambda: write_gif(frames, run / "rollouts" / "step_1.gif"),
        "metrics.csv": lambda: views.write_metrics_csv(snapshot),
        "metrics.jsonl": lambda: trim_events_after(run / "metrics.jsonl", 0),
    }


def test_every_run_file_is_written_atomically(tmp_path, monkeypatch):
    run = tmp_path / "run"
    writers = _writers(run)
    for name in writers:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps({"type": "metrics", "step": 5, "old": name}) + "\n")

    def fail(descriptor):  # the data is in the temporary file; the crash comes before the rename
        raise OSError("disk full")

    monkeypatch.setattr(files_module.os, "fsync", fail)
    for name, write in writers.items():
        with pytest.raises(OSError, match="disk full"):
            write()
        assert json.loads((run / name).read_text())["old"] == name, f"{name} was damaged"
    leftovers = [path.name for path in run.rglob("*") if path.is_file() and path.name.endswith(".tmp")]
    assert leftovers == []
    monkeypatch.undo()
    for write in writers.values():
        write()
    assert "old" not in (run / "config.yaml").read_text()


def test_checkpoint_folder_honours_checkpoint_path(tmp_path):
    from trainer.config.validation import config_from_dict

    assert checkpoint_folder(tmp_path, {"env_name": "cartpole"}) == tmp_path / "checkpoints"
    assert checkpoint_folder(tmp_path, {"checkpoint": {"path": "saves/a"}}) == tmp_path / "saves" / "a"
    assert (
        checkpoint_folder(tmp_path, config_from_dict({"checkpoint": {"path": str(tmp_path / "abs")}}))
        == tmp_path / "abs"
    )
    (tmp_path / "saves" / "a").mkdir(parents=True)
    for step in (500, 1000, 90):
        (tmp_path / "saves" / "a" / f"ckpt_{step}.pth").write_bytes(b"x")
    (tmp_path / "config.yaml").write_text("checkpoint:\n  path: saves/a\n")
    assert latest_checkpoint_path(tmp_path) == tmp_path / "saves" / "a" / "ckpt_1000.pth"  # by step, not by name


@pytest.mark.parametrize(
    "end, alive, started, stopping, status",
    [
        ("finished", True, False, False, "finished"),
        ("stopped", False, False, False, "stopped"),
        ("exploded", False, False, False, "failed"),
        (None, True, True, False, "running"),
        (None, True, False, False, "starting"),
        (None, True, True, True, "stopping"),
        (None, False, True, False, "interrupted"),
        (None, False, True, True, "interrupted"),
    ],
)
def test_the_status_rule(end, alive, started, stopping, status):
    assert run_status(end, alive, started, stopping) == status


@pytest.fixture
def other_process():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def _write_owner(run: Path, pid: int, process_started: float | None) -> None:
    run.mkdir(parents=True, exist_ok=True)
    owner = RunOwner(pid=pid, host=socket.gethostname(), started_at=time.time(), process_started=process_started)
    (run / "owner.json").write_text(json.dumps(owner.__dict__))


def test_one_owner_per_run_folder(tmp_path, other_process):
    import psutil

    run = tmp_path / "run"
    _write_owner(run, other_process.pid, psutil.Process(other_process.pid).create_time())
    with pytest.raises(RunOwnedError, match=f"process {other_process.pid} on host {socket.gethostname()}"):
        take_ownership(run)
    _write_owner(run, other_process.pid, process_started=12.0)  # the pid was reused by another process
    assert live_owner(run) is None
    other_process.kill()
    other_process.wait()
    _write_owner(run, other_process.pid, process_started=None)  # a dead owner's leftover
    owner = take_ownership(run)
    assert live_owner(run) == owner and owner.pid == os.getpid()
    owner.release(run)
    assert not (run / "owner.json").exists()


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path, other_process):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    mine = tmp_path / f".ckpt_1.pth.{os.getpid()}.0123abcd.tmp"
    living = tmp_path / f".ckpt_2.pth.{other_process.pid}.0123abcd.tmp"
    gone = tmp_path / f".ckpt_3.pth.{int(dead.stdout)}.0123abcd.tmp"
    for path in (mine, living, gone):
        path.write_bytes(b"partial")
    remove_stale_temporaries(tmp_path)
    assert mine.exists() and living.exists() and not gone.exists()


def _tiny_config(**overrides) -> dict:
    raw = {
        "env_name": "cartpole",
        "num_envs": 8,
        "num_steps": 16,
        "mini_batch_size": 64,
        "update_epochs": 1,
        "total_timesteps": 8 * 16 * 6,
        "gif_interval": 0,
        "seed": 5,
        "device": "cpu",
        "checkpoint": {"interval": 2, "keep": 2, "path": "saved/here"},
    }
    raw.update(overrides)
    return raw


def test_a_cli_run_with_its_own_checkpoint_path_is_listed_and_resumed_by_the_studio(tmp_path):
    from studio.runs import RunManager
    from trainer.run.layout import create_run_dir
    from trainer.run.loop import train

    config = _tiny_config()
    run = create_run_dir(config, tmp_path)
    updates = []

    def stop_after_three() -> bool:
        return len(updates) >= 3

    train(
        config,
        run,
        sinks=[lambda event: updates.append(event) if event["type"] == "metrics" else None],
        should_stop=stop_after_three,
    )
    assert not (run / "checkpoints").exists() and (run / "saved" / "here" / "ckpt_384.pth").is_file()

    manager = RunManager(tmp_path)
    listed = {snapshot.run_id: snapshot for snapshot in manager.list_runs()}
    assert listed[run.name].status == "stopped"
    assert listed[run.name].latest_checkpoint == str(run / "saved" / "here" / "ckpt_384.pth")
    manager.resume(run.name)  # the real trainer, in a spawned process
    deadline = time.time() + 240
    while manager.get(run.name).is_active:
        assert time.time() < deadline, "the resumed run did not end"
        time.sleep(0.2)
    resumed = manager.get(run.name)
    assert resumed.status == "finished", resumed.error_message
    steps = [metric["step"] for metric in resumed.metrics]
    assert steps == [128 * update for update in range(1, 7)]  # continued from 384, no step twice
    assert not (run / "owner.json").exists()
