"""Refresh the generated tables in the docs pages and the README (run from anywhere):

    python docs/build.py            # rewrite every page whose tables are stale
    python docs/build.py --check    # exit 1, naming the pages, when any table is stale (writes nothing)

The docs are Markdown pages in docs/ (an MkDocs site: `mkdocs serve`, `mkdocs build --strict`)
and README.md, the front door. A few tables in them are not written by hand but generated from
the code that declares them (the config reference from trainer/config/keys.py, ...): each sits
right after its marker comment, and this script replaces the table that follows every marker,
in whichever page holds it, with the one its function returns now. To add one: put the marker
in a page and an entry in GENERATED_TABLES. (`python docs/readme/build_readme.py`, the old
command, runs this.)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Generated tables: marker -> (module, the function that writes the table after it).
GENERATED_TABLES = {
    "<!-- config reference: generated from trainer/config/keys.py -->": (
        "trainer.config.reference",
        "reference_markdown",
    ),
    "<!-- untuned defaults: generated from trainer/config/defaults.py -->": (
        "trainer.config.defaults",
        "untuned_defaults_markdown",
    ),
    "<!-- metric registry: generated from trainer/config/metrics.py -->": (
        "trainer.config.metrics",
        "metrics_markdown",
    ),
    "<!-- run directory: generated from trainer/run/layout.py -->": ("trainer.run.layout", "layout_markdown"),
    "<!-- prometheus metrics: generated from trainer/config/metrics.py -->": (
        "trainer.config.metrics",
        "prometheus_markdown",
    ),
}


def pages() -> list[Path]:
    """Every page that may hold a generated table: README.md and the Markdown files under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def generated_table(marker: str) -> str:
    """The table that belongs after `marker`, as its module writes it now."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module, function = GENERATED_TABLES[marker]
    return getattr(importlib.import_module(module), function)()


def with_generated_tables(text: str) -> str:
    """Replace the table that follows each marker with the one its module gives now."""
    for marker in GENERATED_TABLES:
        if marker not in text:
            continue
        before, _, after = text.partition(marker)
        lines = after.lstrip("\n").split("\n")
        rest = "\n".join(lines[next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines)) :])
        text = f"{before}{marker}\n{generated_table(marker)}\n{rest}"
    return text


def stale_pages() -> dict[Path, str]:
    """page -> its text with fresh tables, for every page whose tables are not the current ones."""
    stale = {}
    for page in pages():
        text = page.read_text(encoding="utf-8")
        fresh = with_generated_tables(text)
        if fresh != text:
            stale[page] = fresh
    return stale


def markers_in_no_page() -> list[str]:
    """Markers of GENERATED_TABLES that no page holds (a table that would silently never be written)."""
    texts = [page.read_text(encoding="utf-8") for page in pages()]
    return [marker for marker in GENERATED_TABLES if not any(marker in text for text in texts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which pages are stale (exit 1 if any)")
    args = parser.parse_args(argv)
    for marker in markers_in_no_page():
        print(f"warning: no page holds the marker {marker}", file=sys.stderr)
    stale = stale_pages()
    for page, text in stale.items():
        name = page.relative_to(ROOT)
        if args.check:
            print(f"stale: {name} (run python docs/build.py)")
        else:
            page.write_text(text, encoding="utf-8")
            print(f"refreshed {name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
