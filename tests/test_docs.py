"""The docs: the README stays a front door, every link leads somewhere, the generated tables are
current, docs/architecture.md names every module, and the site builds with `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
ARCHITECTURE = DOCS / "architecture.md"
MODULE_FOLDERS = ("envs", "trainer", "studio", "benchmarks")
README_MAX_LINES = 300
INSTALL_AND_START = (  # the Quick start's two blocks: the dependencies and the package, then the studio
    "python -m pip install torch==2.13.0 -r requirements.txt   # the CPU build; any torch >= 2.3, or a CUDA build for a GPU\n"
    "python -m pip install -e .",
    "rl-studio",
)
TEST_COMMAND = 'python -m pytest -m "not slow" -q -n auto --dist loadfile'


def _load(name: str):
    """docs/<name>.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"rl_studio_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _modules() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for folder in MODULE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_the_readme_is_a_front_door_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail into a page of docs/ and link it"
    )
    assert all(f"```bash\n{command}\n```" in text for command in INSTALL_AND_START), (
        "README.md lost the install-and-start commands"
    )
    assert f"```bash\n{TEST_COMMAND}\n```" in text, "README.md lost the test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TEST_COMMAND in ci, ".ci/run no longer runs the README's test command"


def test_every_relative_link_points_to_a_file_that_exists():
    """Links in README.md and the docs pages, images included, as GitHub and the site follow them
    (a page's links are relative to its folder). Anchors are checked by the strict build."""
    relative_links = _load("hooks").relative_links
    broken = []
    for page in _pages():
        for target in relative_links(page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_every_docs_page_the_code_names_exists():
    """Messages, docstrings, comments and configs that send a reader to a page (`docs/cluster.md`)
    name one that exists: the pages moved once (docs/readme/ -> docs/), and a stale path is a dead end."""
    sources = [
        path
        for pattern in ("*.py", "*.yaml", "*.yml", "*.toml", "*.txt", "Dockerfile")
        for path in ROOT.rglob(pattern)
        if not {"__pycache__", ".git", "site", "runs", ".venv"} & set(path.relative_to(ROOT).parts)
    ]
    stale = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in [*sources, ROOT / ".ci" / "run"]
        for name in set(re.findall(r"\bdocs/[\w/.-]*\w\.md\b", path.read_text(encoding="utf-8", errors="replace")))
        if not (ROOT / name).is_file()
    )
    assert not stale, "paths of docs pages that do not exist:\n" + "\n".join(stale)


def test_the_generated_tables_are_current():
    build = _load("build")
    stale = [str(page.relative_to(ROOT)) for page in build.stale_pages()]
    assert not stale, f"stale generated tables in {stale}: run python docs/build.py"
    assert not build.markers_in_no_page(), "GENERATED_TABLES names a marker that no page holds"
    declared = set(build.GENERATED_TABLES)
    unknown = sorted(
        f"{page.relative_to(ROOT)}: {marker}"
        for page in _pages()
        for marker in re.findall(r"^<!--[^>\n]*generated from[^>\n]*-->$", page.read_text(encoding="utf-8"), re.M)
        if marker not in declared
    )
    assert not unknown, "markers that docs/build.py does not know (add them to GENERATED_TABLES):\n" + "\n".join(
        unknown
    )


def test_the_architecture_names_every_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [module for module in _modules() if f"`{module}`" not in text]
    assert not missing, (
        f"docs/architecture.md's module map does not name {len(missing)} module(s); add a line for each "
        "to its room's table (## The module map):\n" + "\n".join(f"| `{module}` | ... |" for module in missing)
    )


def test_the_module_map_names_only_modules_that_exist():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    module_map = text[text.index("## The module map") :]
    named = re.findall(r"^\| `([\w/]+\.py)` \|", module_map, re.MULTILINE)
    assert named, "no module rows found under ## The module map"
    gone = [module for module in named if not (ROOT / module).is_file()]
    assert not gone, f"docs/architecture.md's module map names modules that are gone: {gone}"
    twice = sorted({module for module in named if named.count(module) > 1})
    assert not twice, f"named twice in the module map: {twice}"


def test_the_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: every page, link and anchor, the API reference from the docstrings."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs tools: pip install -r requirements-docs.txt")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-8000:]
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "api" / "run" / "index.html").is_file()
    assert (site / "_repo" / "assets" / "screenshot.png").is_file()  # a repository file a page links to
