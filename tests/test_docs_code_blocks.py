"""Every fenced code block of README.md and of every docs/*.md page runs as pasted, as a newcomer
would paste it after the Quick start.

The newcomer: once per session the test runs the README's Quick start install block itself (the
dependencies, then `python -m pip install -e .`) in a copy of the checkout, into a virtual
environment made with `--system-site-packages`: the dependencies are this Python's, and pip runs
with no index and no build isolation, so nothing is downloaded (a requirement this Python lacks
fails the test, naming it). No PYTHONPATH: the package is installed as the README says.

Each page gets a fresh copy of the checkout (the docs' commands name configs/..., and the Quick
start runs in the checkout) and its blocks run there in order, one process each, as a reader
pastes them:

- `python`: the block is written to a file outside that folder and run by the venv's python with
  the folder as working directory, so `import trainer` finds the installed package, not the
  folder's files ("use the model anywhere");
- `bash`: `bash -euo pipefail -c BLOCK`, with the venv first on PATH (python, rl-studio, rl-train);
- `yaml`: parsed;
- `text` (output, folder trees, diagrams) and `pyi` (signatures, not a program): shown, not run.
  A block without a language fails: each one says what it is.

What readers don't see, as HTML comments right before a block:

- `<!-- not-run: REASON -->`: the block is not run (a server that runs until Ctrl-C, several
  machines, Docker, the test suite). NOT_RUN lists them all with their reasons, and the test fails
  when the pages and the list disagree, so the list stays short and honest.
- `<!-- setup: COMMAND -->`: a bash command run before the block, standing for what the prose
  says the reader already has (the model the studio's Download button gave them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(page.relative_to(ROOT)) for page in (ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash")
SHOWN = ("yaml", "text", "pyi")
# development.md builds the whole site (tests/test_docs.py does in the default run); the others train
# for minutes on a small machine: `python -m pytest -m slow tests/test_docs_code_blocks.py` runs them.
SLOW_PAGES = ("docs/development.md", "docs/trainer.md", "docs/algorithms.md", "docs/deploy_game.md")

# Every block not run, by page and first line, with the reason its page gives.
NOT_RUN = {
    ("README.md", "rl-studio"): "starts the studio, which runs until Ctrl-C",
    ("docs/trainer.md", "python -m pip install torch==2.13.0 -r requirements.txt"): (
        "the Quick start's install, which the test runs once per session"
    ),
    ("docs/studio.md", "python -m pip install -r requirements.txt"): "starts the studio, which runs until Ctrl-C",
    ("docs/studio.md", "import time"): "needs the studio running; tests/test_app_studio.py drives the same API",
    ("docs/deploy_game.md", "python -m trainer serve runs/cartpole"): (
        "a server, it runs until Ctrl-C; tests/test_serve.py drives it"
    ),
    ("docs/envs.md", "python -m envs play flappy_bird"): "a game window you play until you close it",
    ("docs/studio.md", "docker build -t rl-studio ."): "Docker, and servers that run until stopped",
    ("docs/operations.md", "cd deploy && RL_STUDIO_PASSWORD=change-me docker compose up -d"): (
        "Docker, and servers that run until stopped"
    ),
    ("docs/trainer.md", "# 2 processes on one machine (CPU: gloo; GPUs: nccl)"): (
        "full trainings on several processes and machines; tests/test_trainer_distributed.py runs two processes"
    ),
    ("docs/sweeps.md", 'python -m pip install "psycopg[binary]"'): "needs a PostgreSQL server",
    ("docs/benchmarks.md", "bash benchmarks/gpu_check.sh"): "needs an NVIDIA GPU",
    (
        "docs/benchmarks.md",
        "pip install -r requirements.txt -r benchmarks/requirements.txt",
    ): "the benchmarks, minutes each",
    ("docs/studio.md", "python benchmarks/studio_overhead.py --repeats 3"): "the benchmarks, minutes each",
    ("docs/sweeps.md", "python -m benchmarks.sweep_savings"): "a 30-trial sweep and six checking runs, minutes",
    ("docs/sweeps.md", 'python -m pip install "optuna>=4"'): (
        "a sweep of 40 trainings, minutes; tests/test_sweep.py runs small ones"
    ),
    ("README.md", 'python -m pytest -m "not slow" -q -n auto --dist loadfile'): "runs tests, this one among the suite",
    (
        "docs/development.md",
        'python -m pytest -m "not slow" -q -n auto --dist loadfile',
    ): "runs tests, this one among the suite",
    (
        "docs/trainer.md",
        'python -m pytest -m "not slow" -q tests/test_config.py tests/test_checkpoint.py tests/test_trainer_*.py',
    ): ("runs tests, this one among the suite"),
    (
        "docs/studio.md",
        "python -m pytest tests/test_studio_runs.py tests/test_studio_views.py tests/test_studio_charts.py \\",
    ): ("runs tests, this one among the suite"),
}

BLOCK = re.compile(r"(?P<comments>(?:<!--[^\n]*-->\n)*)^```(?P<language>[\w-]*)\n(?P<code>.*?)^```", re.S | re.M)
COMMENT = re.compile(r"<!--\s*(not-run|setup):\s*(.*?)\s*-->")


class Block:
    def __init__(self, page: str, language: str, code: str, comments: str, line: int):
        self.page, self.language, self.code, self.line = page, language, code, line
        notes = COMMENT.findall(comments)
        self.not_run = next((text for kind, text in notes if kind == "not-run"), None)
        self.setup = [text for kind, text in notes if kind == "setup"]
        self.first_line = code.strip().splitlines()[0].split("  #")[0].strip() if code.strip() else ""

    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.language or 'no language'})"


def code_blocks(page: str) -> list[Block]:
    """Every fenced block of a page, in order, with the comments right before it."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [
        Block(
            page, match["language"], match["code"], match["comments"], text.count("\n", 0, match.start("language")) + 1
        )
        for match in BLOCK.finditer(text)
    ]


def copy_checkout(destination: Path) -> Path:
    """The checkout's files as a newcomer's clone has them: no git, runs, builds or caches."""
    ignore = shutil.ignore_patterns(
        ".git", "runs", "build", "site", ".venv", "__pycache__", "*.egg-info", ".pytest_cache"
    )
    shutil.copytree(ROOT, destination, ignore=ignore)
    return destination


@pytest.fixture(scope="session")
def newcomer(tmp_path_factory) -> dict[str, str]:
    """The environment of a shell after the Quick start's install: the venv first on PATH."""
    base = tmp_path_factory.mktemp("newcomer")
    venv = base / "venv"
    # --without-pip: `python -m pip` is this Python's pip, which installs into the venv it runs in
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environment.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        VIRTUAL_ENV=str(venv),
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        SDL_VIDEODRIVER="dummy",
        MPLBACKEND="Agg",
    )
    install = quick_start_install()
    offline = {**environment, "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # "0": no isolation
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", install.code],
        cwd=copy_checkout(base / "checkout"),
        capture_output=True,
        text=True,
        timeout=900,
        env=offline,
    )
    assert done.returncode == 0, f"the Quick start's install failed:\n{install.code}\n{done.stderr[-3000:]}"
    return environment


def quick_start_install() -> Block:
    """README.md's first block: the Quick start's install, which the session fixture runs."""
    block = code_blocks("README.md")[0]
    assert "pip install -e ." in block.code, f"{block.where()} should be the Quick start's install"
    return block


def run_block(block: Block, folder: Path, scripts: Path, environment: dict[str, str]) -> None:
    for command in block.setup:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            env=environment,
        )
        assert done.returncode == 0, f"{block.where()}: its setup `{command}` failed:\n{done.stderr[-3000:]}"
    if block.language == "python":
        script = scripts / f"block_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        command = ["python", str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, env=environment)
    assert done.returncode == 0, (
        f"{block.where()}: this block failed:\n{block.code}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    )


@pytest.mark.timeout(1800)  # a page runs its blocks one after another, each within run_block's 600 s
@pytest.mark.parametrize(
    "page", [pytest.param(page, marks=[pytest.mark.slow] if page in SLOW_PAGES else []) for page in PAGES]
)
def test_every_code_block_runs_as_pasted(page, newcomer, tmp_path):
    blocks = code_blocks(page)
    folder = copy_checkout(tmp_path / "checkout")
    scripts = tmp_path / "snippets"
    scripts.mkdir()
    for block in blocks:
        if block.not_run is not None or (page == "README.md" and block.line == quick_start_install().line):
            continue  # not run, or the Quick start's install, which the session fixture ran
        if block.language in SHOWN:
            if block.language == "yaml":
                yaml.safe_load(block.code)
            continue
        assert block.language in RUN, f"{block.where()}: say what the block is: ```{' / ```'.join(RUN + SHOWN)}"
        run_block(block, folder, scripts, newcomer)


def test_the_blocks_not_run_are_the_listed_ones():
    marked = {
        (block.page, block.first_line): block.not_run
        for page in PAGES
        for block in code_blocks(page)
        if block.not_run is not None
    }
    assert marked == NOT_RUN


def test_the_readme_console_line_is_what_the_studio_prints():
    from studio.ui import startup_line

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pattern = re.escape(startup_line("URL", "RUNS")).replace("URL", r"http://\S+").replace("RUNS", r"[^)]+")
    assert re.search(pattern, readme), f"README.md shows no console line like: {startup_line('URL', 'RUNS')}"
