"""The bad-input corpus (issue 10): every case from the issue, through the studio's YAML box and
upload, its API (in process and against a real server), the Evaluate upload and the CLI.

For each case: a clear message that names the key or file (short, no traceback, no server temp
path), no run folder created, nothing written outside the runs folder, and the server still
answering. The memory cases run in a child process under RLIMIT_AS. The totals (tried / clear /
crashes) are printed at the end of the session and written to bad_inputs_totals.json in the
pytest temp folder.
"""

from __future__ import annotations

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
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)
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
    clear = (
        expected.lower() in message.lower()
        and len(message) <= MAX_MESSAGE
        and "Traceback" not in message
        and "/tmp/gradio" not in message
    )
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


@pytest.mark.parametrize(
    "env_name, settings, expected",
    [
        ("snake", {"env_kwargs": {"grid_size": -3}}, "grid_size"),
        ("/some/dir/secret", {}, "env_name"),
        ("../../configs/cartpole", {}, "env_name"),
        ("os:system", {"env_kwargs": {"command": "touch /tmp/pwned"}}, "--allow-custom-envs"),
        ("x" * 10_000, {}, "env_name"),
    ],
)
def test_api_start_env_names(studio, env_name, settings, expected):
    judge(lambda: studio.api_start(env_name, settings), expected, studio.manager.runs_dir)


@pytest.mark.parametrize(
    "run_id, expected",
    [("x" * 10_000, "at most 200 characters"), ("../../etc", "not a valid run id"), ("", "no run selected")],
)
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


@pytest.mark.parametrize(
    "content, expected", [(b"num_envs: 4\n" + b"#" * 2_000_000, "too large"), (b"\xff\xfe\x00bad", "not a text")]
)
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
    from trainer.config.validation import config_from_dict
    from trainer.nets.build import build_policy
    from trainer.run.checkpoint import FORMAT, FORMAT_VERSION
    from trainer.run.setup import policy_spec

    config = config_from_dict({"env_name": "cartpole"})
    env = make_vec_env("cartpole", 1, device="cpu")
    spec = policy_spec(config, env)
    env.close()
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": "model",
        "policy_spec": spec,
        "policy_state": build_policy(spec).state_dict(),
        "config": config.to_dict(),
        "env_name": "cartpole",
        "algo": "ppo",
        "global_step": 0,
        "update": 0,
    }
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


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("pickle-runs-code", "model.pth"),
        ("zip-bomb", "inflate"),
        ("huge-obs-shape", "model.pth"),
        ("entry-point-env", "--allow-custom-envs"),
        ("garbage", "not a readable"),
    ],
)
def test_evaluate_upload(studio, tmp_path, kind, expected):
    upload = tmp_path / "gradio" / ("b" * 64) / "model.pth"
    upload.parent.mkdir(parents=True)
    crafted(kind, upload)
    message = judge(
        lambda: studio.on_evaluate("upload", None, None, str(upload), 1, True)[0], expected, studio.manager.runs_dir
    )
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
        studio = Studio(RunManager({str(tmp_path / "runs")!r}))
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
        result = subprocess.run(
            [sys.executable, "-m", "trainer", *args, "--runs-dir", str(runs), "--quiet"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
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


# ----------------------------------------------------------------------------- the trainer probe: control
# characters in YAML, a full disk, a model on the wrong game, resuming a finished run, export over a file

PROBE_NUL_YAML = "env_name: cartpole\nnum_envs: 4\x00\n"
PROBE_NUL_MESSAGE = "control character (NUL, 0x00) at line 2 column 12"
PROBE_TINY = {
    "env_name": "cartpole",
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 32,
    "update_epochs": 1,
    "total_timesteps": 256,
    "gif_interval": 0,
    "torch_threads": 1,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory) -> Path:
    """A finished CartPole run (2 updates, 256 steps) alone in its runs folder."""
    from trainer.run.loop import train

    run_dir = tmp_path_factory.mktemp("probe") / "runs" / "cartpole-ppo-small-1"
    train(PROBE_TINY, run_dir)
    return run_dir


def test_probe_yaml_box_with_a_nul_byte(studio):
    message = judge(lambda: studio.on_load_yaml(PROBE_NUL_YAML)[-1], PROBE_NUL_MESSAGE, studio.manager.runs_dir)
    assert "ReaderError" not in message


def test_probe_evaluate_upload_of_a_model_whose_network_is_for_another_game(studio, tmp_path):
    upload = tmp_path / "gradio" / ("c" * 64) / "model.pth"
    upload.parent.mkdir(parents=True)
    payload = model_payload()  # a CartPole network (4 observations) ...
    torch.save(dict(payload, config=dict(payload["config"], env_name="snake")), upload)  # ... said to play snake
    message = judge(
        lambda: studio.on_evaluate("upload", None, None, str(upload), 1, True)[0],
        "the model expects observations of shape [4] but snake gives [18]",
        studio.manager.runs_dir,
    )
    assert "mat1" not in message and str(upload.parent) not in message


def test_probe_full_disk_is_what_the_studio_shows(tmp_path, monkeypatch):
    import errno

    import trainer.run.checkpoint
    from studio.history import RunFollower
    from trainer.cluster.process import run_training

    def disk_full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(trainer.run.checkpoint, "atomic_write", disk_full)
    runs = tmp_path / "runs"
    run_dir = (runs / "cartpole-ppo-small-1").resolve()
    run_dir.mkdir(parents=True)

    def train_and_look():
        run_training(dict(PROBE_TINY, checkpoint={"interval": 1}), str(run_dir), None, None, False)
        run = RunFollower(run_dir.name, run_dir).refresh(owner_alive=False).snapshot()
        assert run.status == "failed"
        return run.error_message

    judge(train_and_look, f"the disk holding {run_dir} is full (", runs)


PROBE_CLI_CASES = [
    (PROBE_NUL_MESSAGE, ["--config", "{tmp}/nul.yaml", "--runs-dir", "{tmp}/runs"]),
    (
        (
            "the model expects observations of shape [4] but snake gives [18]: evaluate it on the env it was trained "
            "on (cartpole)"
        ),
        ["evaluate", "{run}/cartpole_ppo_final.pth", "--env", "snake", "--episodes", "1"],
    ),
    ("finished at step 256", ["--resume", "{run}"]),
    ("there is a file at this path already; pass --force", ["export", "{run}", "--onnx", "{tmp}/taken.onnx"]),
    ("there is a symbolic link", ["export", "{run}", "--onnx", "{tmp}/link.onnx"]),
]


@pytest.mark.parametrize(
    "expected, args",
    PROBE_CLI_CASES,
    ids=["nul-yaml", "evaluate-wrong-game", "resume-finished", "export-over-a-file", "export-over-a-link"],
)
def test_probe_cli(probe_run, tmp_path, expected, args):
    (tmp_path / "nul.yaml").write_text(PROBE_NUL_YAML)
    (tmp_path / "taken.onnx").write_text("an earlier export")
    (tmp_path / "target.txt").write_text("not an export")
    (tmp_path / "link.onnx").symlink_to(tmp_path / "target.txt")
    history = (probe_run / "metrics.jsonl").read_text()
    args = [arg.format(tmp=tmp_path, run=probe_run) for arg in args]

    def run():
        result = subprocess.run(
            [sys.executable, "-m", "trainer", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        assert result.returncode == 2, result.stderr[-2000:]
        if "Traceback" in result.stderr:
            TOTALS["crashes"] += 1
        return result.stderr + result.stdout

    judge(run, expected, probe_run.parent)
    assert not (tmp_path / "runs").exists()
    assert (tmp_path / "taken.onnx").read_text() == "an earlier export"
    assert (tmp_path / "link.onnx").is_symlink() and (tmp_path / "target.txt").read_text() == "not an export"
    assert (probe_run / "metrics.jsonl").read_text() == history and history.count('"type":"end"') == 1


# ----------------------------------------------------------------------------- monitoring, logins, scratch
# The trainer's /metrics (local by default, a key beyond), password guesses at the studio's
# /login and /metrics (one throttle), uploads over the limit, an ONNX export that cannot be made.


def _monitoring_http(request) -> str:
    """'<status> <body>' of an HTTP request, error answers included."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return f"{response.status} {response.read().decode(errors='replace')}"
    except urllib.error.HTTPError as error:
        return f"{error.code} {error.read().decode(errors='replace')}"


@pytest.fixture
def monitoring_studio(tmp_path):
    """A Gradio app launched the studio's way: --auth alice:s3cret, its /metrics, uploads up to 1 MB."""
    from test_studio_helpers import guarded_app

    with guarded_app(tmp_path, [("alice", "s3cret")]) as url:
        yield url


def _monitoring_guess(url: str, where: str, password: str) -> str:
    import base64
    import urllib.parse
    import urllib.request

    if where == "login":
        body = urllib.parse.urlencode({"username": "alice", "password": password}).encode()
        return _monitoring_http(urllib.request.Request(url + "/login", data=body))
    token = base64.b64encode(f"alice:{password}".encode()).decode()
    return _monitoring_http(urllib.request.Request(url + "/metrics", headers={"Authorization": f"Basic {token}"}))


def _monitoring_upload(url: str, files: dict[str, bytes], chunked: bool = False) -> str:
    import urllib.request

    boundary = "----bad-input"
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n\r\n'.encode()
            + data
            + b"\r\n"
            for name, data in files.items()
        )
        + f"--{boundary}--\r\n".encode()
    )
    return _monitoring_http(
        urllib.request.Request(
            url + "/gradio_api/upload",
            data=iter([body]) if chunked else body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
    )


def test_monitoring_public_metrics_host_without_a_key(tmp_path, monkeypatch):
    from test_studio_helpers import free_port

    monkeypatch.delenv("RL_STUDIO_METRICS_KEY", raising=False)

    def run():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainer",
                "-c",
                str(REPO / "configs/cartpole.yaml"),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--metrics-port",
                str(free_port()),
                "--metrics-host",
                "0.0.0.0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert result.returncode == 2, result.stderr[-2000:]
        TOTALS["crashes"] += "Traceback" in result.stderr
        return result.stderr

    message = judge(run, "--metrics-key", tmp_path / "runs")
    assert "RL_STUDIO_METRICS_KEY" in message and "127.0.0.1" in message


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic YTpi"},
        {"Authorization": "Bearer"},
        {"X-API-Key": "k3y-but-not-quite"},
    ],
    ids=["none", "wrong-bearer", "basic", "empty-bearer", "wrong-x-api-key"],
)
def test_monitoring_trainer_scrape_without_the_key(tmp_path, headers):
    import urllib.request

    from trainer.serving.metrics_server import serve_trainer_metrics

    _, server = serve_trainer_metrics(0, key="k3y")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.address[1]}/metrics", headers=headers)
        message = judge(lambda: _monitoring_http(request), "Authorization: Bearer KEY", tmp_path / "runs")
    finally:
        server.close()
    assert message.startswith("401") and "rlstudio_" not in message


@pytest.mark.parametrize("where", ["login", "metrics"])
def test_monitoring_password_guesses_past_the_limit(monitoring_studio, tmp_path, where):
    for attempt in range(5):
        assert _monitoring_guess(monitoring_studio, where, f"guess{attempt}")[:3] in ("400", "401")
    message = judge(lambda: _monitoring_guess(monitoring_studio, where, "s3cret"), "try again in", tmp_path / "runs")
    assert message.startswith("429")


def test_monitoring_login_form_too_large(monitoring_studio, tmp_path):
    import urllib.request

    request = urllib.request.Request(monitoring_studio + "/login", data=b"username=alice&password=" + b"x" * 100_000)
    assert judge(lambda: _monitoring_http(request), "login form is too large", tmp_path / "runs").startswith("413")


@pytest.mark.parametrize(
    "files, chunked, expected",
    [
        ({"model.pth": b"x" * (2 * 2**20)}, False, "at most 1 MB per upload"),
        ({f"part{i}.pth": b"x" * (600 * 1024) for i in range(4)}, False, "at most 1 MB per upload"),
        ({"config.yaml": b"num_envs: 4\n"}, True, "Content-Length"),
    ],
    ids=["one-file-over", "many-files-over-together", "no-stated-size"],
)
def test_monitoring_uploads_over_the_limit(monitoring_studio, tmp_path, files, chunked, expected):
    message = judge(lambda: _monitoring_upload(monitoring_studio, files, chunked), expected, tmp_path / "runs")
    assert message[:3] in ("411", "413")


@pytest.mark.parametrize("size", ["12xb", "0mb", "-5mb", "lots"])
def test_monitoring_bad_max_upload_size(tmp_path, size):
    def run():
        result = subprocess.run(
            [sys.executable, str(REPO / "app.py"), "--runs-dir", str(tmp_path / "runs"), "--max-upload-size", size],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert result.returncode == 2
        TOTALS["crashes"] += "Traceback" in result.stderr
        return result.stderr

    judge(run, "--max-upload-size", tmp_path / "runs")


def test_monitoring_onnx_export_of_a_run_without_a_model(tmp_path):
    from studio.scratch import ScratchFolder
    from studio.watch import WatchError, export_run_onnx

    run_dir = tmp_path / "runs" / "cartpole-empty"
    run_dir.mkdir(parents=True)
    scratch = ScratchFolder()
    judge(lambda: export_run_onnx(run_dir, scratch), "no final model", tmp_path / "runs", error_types=(WatchError,))
    assert not list(scratch.path.glob("onnx/*")) and not Path("/tmp/rl-studio-onnx/cartpole-empty").exists()
    scratch.cleanup()


# ----------------------------------------------------------------------------- the policy server
# POST /v1/act on a real `trainer serve` (in this process): JSON bombs, numbers past their limits,
# NaN, observations that are not numbers, bodies that are not JSON. Each a 4xx with a message
# (a 500 counts as a crash), and /healthz answers after each.

POLICY_JSON = "application/json"
POLICY_CASES = [  # (what the message says, body, Content-Type)
    ("more than 64 levels deep", b'{"obs": ' + b"[" * 5000 + b"]" * 5000 + b"}", POLICY_JSON),
    ("401 characters", b'{"obs": [1' + b"0" * 400 + b", 0, 0, 0, 0]}", POLICY_JSON),  # 10**400 written out
    ("1e400 is beyond a float's range", b'{"obs": [1e400, 0, 0, 0, 0]}', POLICY_JSON),
    ("5000 characters", b'{"obs": [' + b"7" * 5000 + b", 0, 0, 0, 0]}", POLICY_JSON),
    ("NaN is not a JSON number", b'{"obs": [NaN, 0, 0, 0, 0]}', POLICY_JSON),
    ("-Infinity is not a JSON number", b'{"obs": [-Infinity, 0, 0, 0, 0]}', POLICY_JSON),
    ("'obs' must hold numbers only; found true", b'{"obs": [true, false, 0, 0, 0]}', POLICY_JSON),
    ("'obs' must hold numbers only; found \"1.5\"", b'{"obs": ["1.5", "2", 0, 0, 0]}', POLICY_JSON),
    ("not JSON", b'{"obs": [0, 0', POLICY_JSON),
    ("Content-Type: application/json", b'{"obs": [0, 0, 0, 0, 0]}', None),
    ("Content-Type: application/json", b'{"obs": [0, 0, 0, 0, 0]}', "text/plain"),
]


@pytest.fixture(scope="module")
def policy_server():
    from test_serve import make_model
    from trainer.serving.serve import start_server

    server = start_server(make_model())
    yield server
    server.stop()


def _policy_post(port: int, body: bytes, content_type: str | None) -> tuple[int, str]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v1/act", body, {"Content-Type": content_type} if content_type else {})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


@pytest.mark.parametrize(
    "expected, body, content_type", POLICY_CASES, ids=[f"{i}-{case[0][:24]}" for i, case in enumerate(POLICY_CASES)]
)
def test_policy_server_act(policy_server, tmp_path, expected, body, content_type):
    import urllib.request

    def act() -> str:
        status, text = _policy_post(policy_server.port, body, content_type)
        assert 400 <= status < 500, f"{status}: {text[:300]}"
        return json.loads(text)["detail"]

    judge(act, expected, tmp_path)
    with urllib.request.urlopen(policy_server.url + "/healthz", timeout=5) as response:
        assert json.load(response) == {"status": "ok"}
