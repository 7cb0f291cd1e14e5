"""The bad-input corpus (issue 10): every case from the issue, through the studio's YAML box and
upload, its API (in process and against a real server), the Evaluate upload and the CLI.

For each case: a clear message that names the key or file (short, no traceback, no server temp
path), no run folder created, nothing written outside the runs folder, and the server still
answering. The memory cases run in a child process under RLIMIT_AS. The totals (tried / clear /
crashes) are printed at the end of the session and written to bad_inputs_totals.json in the
pytest temp folder.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import gradio as gr
import pytest
import torch

from studio.callbacks import Studio
from studio.runs import RunManager
from test_studio_helpers import REPO

TOTALS = {"tried": 0, "clear": 0, "crashes": 0}
MAX_MESSAGE = 1500  # a message quotes at most a short excerpt of what it was given

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
NUM_ENVS_BOMB = "num_envs: [&a [x, x, x, x], &b [*a, *a, *a, *a], &c [*b, *b, *b, *b], [*c, *c, *c, *c]]\n"


@pytest.fixture(scope="module", autouse=True)
def report_totals(request, tmp_path_factory):
    yield
    line = f"bad-input corpus: tried {TOTALS['tried']}, clear {TOTALS['clear']}, crashes {TOTALS['crashes']}"
    (tmp_path_factory.getbasetemp() / "bad_inputs_totals.json").write_text(json.dumps(TOTALS))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n" + line)


@pytest.fixture
def studio(tmp_path) -> Studio:
    studio = Studio(RunManager(tmp_path / "runs"))
    yield studio
    studio.scratch.cleanup()


def folders(path: Path) -> set[str]:
    return set(os.listdir(path)) if path.is_dir() else set()


def judge(call, expected: str, runs: Path, *, error_types=(gr.Error,)) -> str:
    """Run `call`, count it, and check its message: names `expected`, short, no traceback, no
    temp path; no run folder appeared. Anything else raised is a crash."""
    before = folders(runs)
    TOTALS["tried"] += 1
    try:
        message = call()
    except error_types as error:
        message = str(error)
    except Exception:
        TOTALS["crashes"] += 1
        raise
    message = str(message)
    clear = (expected.lower() in message.lower() and len(message) <= MAX_MESSAGE and "Traceback" not in message
             and "/tmp/gradio" not in message)
    TOTALS["clear"] += clear
    assert expected.lower() in message.lower(), message[:500]
    assert len(message) <= MAX_MESSAGE, f"{len(message)} characters"
    assert "Traceback" not in message and "/tmp/gradio" not in message
    assert folders(runs) == before, "a run folder was created"
    return message


# ----------------------------------------------------------------------------- the API (/start)

API_CASES = [
    ("num_envs", {"num_envs": 10**12}),
    ("num_envs", {"num_envs": 10**62}),
    ("num_envs", {"num_envs": 10**7}),  # passes the bounds of some machines: the memory preflight names it
    ("num_envs", {"num_envs": "many"}),
    ("num_steps", {"num_steps": 10**9}),
    ("total_timesteps", {"total_timesteps": 10**18}),
    ("update_epochs", {"update_epochs": 10**9}),
    ("gif_max_frames", {"gif_max_frames": 10**9}),
    ("torch_threads", {"torch_threads": 10**6}),
    ("num_workers", {"num_workers": 10**6}),
    ("keep", {"checkpoint.keep": 10**9}),
    ("seed", {"seed": 2**70}),
    ("learning_rate", {"learning_rate": -1}),
    ("env_kwargs", {"env_kwargs": {"no_such_option": 1}}),
    ("mapping", "not a mapping"),
]


@pytest.mark.parametrize("expected, settings", API_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(API_CASES)])
def test_api_start(studio, expected, settings):
    judge(lambda: studio.api_start("cartpole", settings), expected, studio.manager.runs_dir)


@pytest.mark.parametrize("env_name, settings, expected", [
    ("snake", {"env_kwargs": {"grid_size": -3}}, "grid_size"),
    ("/some/dir/secret", {}, "env_name"),
    ("../../configs/cartpole", {}, "env_name"),
    ("os:system", {"env_kwargs": {"command": "touch /tmp/pwned"}}, "--allow-custom-envs"),
    ("x" * 10_000, {}, "env_name"),
])
def test_api_start_env_names(studio, env_name, settings, expected):
    judge(lambda: studio.api_start(env_name, settings), expected, studio.manager.runs_dir)


@pytest.mark.parametrize("run_id, expected", [
    ("x" * 10_000, "at most 200 characters"),
    ("../../etc", "not a valid run id"),
    ("", "no run selected"),
])
def test_api_run_ids(studio, run_id, expected):
    judge(lambda: studio.api_poll(run_id), expected, studio.manager.runs_dir)
    judge(lambda: studio.api_stop(run_id), expected, studio.manager.runs_dir)


# ----------------------------------------------------------------------------- the YAML box and upload

YAML_CASES = [
    ("alias", BOMB),
    ("alias", NUM_ENVS_BOMB),
    ("nested", "a: " + "[" * 100_000 + "]" * 100_000),
    ("empty", ""),
    ("second time", "num_envs: 4\nnum_envs: 8\n"),
    ("mapping", "- just\n- a list\n"),
    ("too large", "# " + "x" * 50_000_000),
    ("nmu_envs", "nmu_envs: 3\n"),
    ("num_envs", "num_envs: 1000000000000\n"),
    ("seed", "seed: 1180591620717411303424\n"),
]


@pytest.mark.parametrize("expected, text", YAML_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(YAML_CASES)])
def test_yaml_box(studio, expected, text):
    def load():
        updates = studio.on_load_yaml(text)
        return updates[-1]
    message = judge(load, expected, studio.manager.runs_dir)
    assert not message.startswith("Loaded")


@pytest.mark.parametrize("content, expected", [
    (b"num_envs: 4\n" + b"#" * 2_000_000, "too large"),
    (b"\xff\xfe\x00bad", "not a text"),
])
def test_yaml_upload(studio, tmp_path, content, expected):
    upload = tmp_path / "gradio" / ("a" * 64) / "my-config.yaml"  # where Gradio would keep it
    upload.parent.mkdir(parents=True)
    upload.write_bytes(content)
    message = judge(lambda: studio.on_upload_yaml(str(upload))[-1], expected, studio.manager.runs_dir)
    assert "my-config.yaml" in message and str(upload.parent) not in message


# ----------------------------------------------------------------------------- the Evaluate upload


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch /tmp/rl-studio-pwned",))


def model_payload(**changes) -> dict:
    """A real CartPole model payload (an untrained network), with `changes` on top."""
    from envs import make_vec_env
    from trainer.checkpoint import FORMAT, FORMAT_VERSION
    from trainer.config import config_from_dict
    from trainer.models import build_policy
    from trainer.setup import policy_spec

    config = config_from_dict({"env_name": "cartpole"})
    env = make_vec_env("cartpole", 1, device="cpu")
    spec = policy_spec(config, env)
    env.close()
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": "model", "policy_spec": spec,
               "policy_state": build_policy(spec).state_dict(), "config": config.to_dict(),
               "env_name": "cartpole", "algo": "ppo", "global_step": 0, "update": 0}
    payload.update(changes)
    return payload


def zip_bomb(path: Path) -> None:
    """A valid-looking torch zip whose one member inflates to 1.2 GB (written in 1 MB pieces)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("archive/data/0", "w", force_zip64=True) as member:
            chunk = bytes(2**20)
            for _ in range(1200):
                member.write(chunk)


def crafted(kind: str, path: Path) -> None:
    if kind == "pickle-runs-code":
        torch.save({"format": "x", "evil": RunsCode()}, path)
    elif kind == "zip-bomb":
        zip_bomb(path)
    elif kind == "huge-obs-shape":
        payload = model_payload()
        payload["policy_spec"] = dict(payload["policy_spec"], obs_shape=[40_000_000])
        torch.save(payload, path)
    elif kind == "entry-point-env":
        payload = model_payload()
        payload["config"] = dict(payload["config"], env_name="os:system", env_kwargs={"command": "true"})
        torch.save(dict(payload, env_name="os:system"), path)
    elif kind == "garbage":
        path.write_bytes(b"not a model at all" * 10)


@pytest.mark.parametrize("kind, expected", [
    ("pickle-runs-code", "model.pth"),
    ("zip-bomb", "inflate"),
    ("huge-obs-shape", "model.pth"),
    ("entry-point-env", "--allow-custom-envs"),
    ("garbage", "not a readable"),
])
def test_evaluate_upload(studio, tmp_path, kind, expected):
    upload = tmp_path / "gradio" / ("b" * 64) / "model.pth"
    upload.parent.mkdir(parents=True)
    crafted(kind, upload)
    message = judge(lambda: studio.on_evaluate("upload", None, None, str(upload), 1, True)[0], expected,
                    studio.manager.runs_dir)
    assert str(upload.parent) not in message
    assert not Path("/tmp/rl-studio-pwned").exists()


# ----------------------------------------------------------------------------- memory, under a limit


@pytest.mark.parametrize("case", ["yaml-alias-bomb", "huge-obs-shape"])
def test_memory_cases_stay_small_under_rlimit_as(tmp_path, case):
    """In a child limited to 6 GiB of address space (torch and gradio alone map ~3 GiB): the
    request is refused without the gigabytes it asks for, and the child exits normally."""
    model = tmp_path / "model.pth"
    if case == "huge-obs-shape":
        crafted("huge-obs-shape", model)
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (6 * 1024 ** 3, 6 * 1024 ** 3))
        sys.path.insert(0, {str(REPO)!r})
        from studio.callbacks import Studio
        from studio.runs import RunManager
        studio = Studio(RunManager({str(tmp_path / 'runs')!r}))
        if {case!r} == "yaml-alias-bomb":
            print(studio.on_load_yaml({NUM_ENVS_BOMB!r} + {BOMB!r})[-1])
        else:
            print(studio.on_evaluate("upload", None, None, {str(model)!r}, 1, True)[0])
    """)
    TOTALS["tried"] += 1
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    ok = result.returncode == 0 and "Traceback" not in result.stdout
    TOTALS["crashes"] += not ok
    assert ok, result.stderr[-2000:]
    expected = "alias" if case == "yaml-alias-bomb" else "model.pth"
    TOTALS["clear"] += expected in result.stdout
    assert expected in result.stdout, result.stdout[-1000:]


# ----------------------------------------------------------------------------- the CLI

CLI_CASES = [
    ("num_envs", ["--set", "num_envs=1000000000000"]),
    ("seed", ["--set", "seed=1180591620717411303424"]),
    ("alias", ["--config", "bomb.yaml"]),
    ("utf-8", ["--config", "binary.yaml"]),
    ("nested", ["--config", "deep.yaml"]),
    ("grid_size", ["--config", "configs/snake.yaml", "--set", "env_kwargs={grid_size: -3}"]),
]


@pytest.mark.parametrize("expected, args", CLI_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CLI_CASES)])
def test_cli(tmp_path, expected, args):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    (tmp_path / "binary.yaml").write_bytes(b"num_envs: \xff\xfe 4\n")
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 100_000 + "]" * 100_000)
    args = [str(REPO / arg) if arg.startswith("configs/") else arg for arg in args]
    runs = tmp_path / "runs"
    before = folders(tmp_path)

    def run():
        result = subprocess.run([sys.executable, "-m", "trainer", *args, "--runs-dir", str(runs), "--quiet"],
                                capture_output=True, text=True, timeout=120, cwd=tmp_path,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert result.returncode != 0
        if "Traceback" in result.stderr:
            TOTALS["crashes"] += 1
        return result.stderr + result.stdout

    judge(run, expected, runs)
    assert folders(tmp_path) <= before | {"runs"}, "a file was written outside the runs folder"
    assert folders(runs) == set()


# ----------------------------------------------------------------------------- a real server keeps answering


def test_a_real_server_answers_bad_requests_clearly_and_keeps_answering(tmp_path):
    from gradio_client import Client

    from test_studio_helpers import start_studio

    server = start_studio(tmp_path / "runs", tmp_path / "studio.log")
    try:
        client = Client(server.url, verbose=False)
        for call, expected in [
            (lambda: client.predict("x" * 10_000, api_name="/poll"), "at most 200 characters"),
            (lambda: client.predict("cartpole", {"num_envs": 10**12}, api_name="/start"), "num_envs"),
            (lambda: client.predict("/some/dir/secret", {}, api_name="/start"), "env_name"),
            (lambda: client.predict("cartpole", {"num_envs": 10**7}, api_name="/start"), "num_envs"),
        ]:
            judge(call, expected, tmp_path / "runs", error_types=(Exception,))
        assert client.predict(api_name="/runs") == []  # still answering, and no run was created
    finally:
        server.stop()
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "upstream Gradio app has raised an exception" not in log
