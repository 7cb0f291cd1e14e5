"""Assemble README.md from the sections in docs/readme/ (run from the repository root).

Each area keeps its README section in its own file so that engineers working on different
layers do not edit one file at once:  python docs/readme/build_readme.py
"""
import sys
from pathlib import Path

# Generated tables: marker -> (module, the function that writes the table after it).
GENERATED_TABLES = {
    "<!-- config reference: generated from trainer/config/keys.py -->": ("trainer.config.keys", "reference_markdown"),
    "<!-- untuned defaults: generated from trainer/config/defaults.py -->": ("trainer.config.defaults", "untuned_defaults_markdown"),
}

SECTIONS = ["_header.md", "studio.md", "trainer.md", "envs.md", "pool.md", "deploy_game.md", "cluster.md", "benchmarks.md", "operations.md", "_footer.md"]


def main() -> None:
    folder = Path(__file__).parent
    parts = []
    for name in SECTIONS:
        text = (folder / name).read_text().strip()
        # Links in the sections are written relative to docs/readme/; the README sits at the root.
        text = text.replace("](../../", "](")
        if any(marker in text for marker in GENERATED_TABLES):
            text = with_generated_tables(text)
            (folder / name).write_text(text + "\n")  # the section file shows the current tables too
        parts.append(text)
    Path("README.md").write_text("\n\n".join(parts) + "\n")


def with_generated_tables(text: str) -> str:
    """Replace the table that follows each marker with the one its module gives now."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import importlib

    for marker, (module, function) in GENERATED_TABLES.items():
        if marker not in text:
            continue
        before, _, after = text.partition(marker)
        lines = after.lstrip("\n").split("\n")
        rest = "\n".join(lines[next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines)):])
        text = f"{before}{marker}\n{getattr(importlib.import_module(module), function)()}\n{rest}"
    return text


if __name__ == "__main__":
    main()
