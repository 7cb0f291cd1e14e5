"""Assemble README.md from the sections in docs/readme/ (run from the repository root).

Each area keeps its README section in its own file so that engineers working on different
layers do not edit one file at once:  python docs/readme/build_readme.py
"""
import sys
from pathlib import Path

# The config reference table is generated from the key declarations in trainer/config.py.
CONFIG_TABLE = "<!-- config reference: generated from trainer/config.py -->"

SECTIONS = ["_header.md", "studio.md", "trainer.md", "envs.md", "pool.md", "deploy_game.md", "cluster.md", "benchmarks.md", "operations.md", "_footer.md"]


def main() -> None:
    folder = Path(__file__).parent
    parts = []
    for name in SECTIONS:
        text = (folder / name).read_text().strip()
        # Links in the sections are written relative to docs/readme/; the README sits at the root.
        text = text.replace("](../../", "](")
        if CONFIG_TABLE in text:
            text = with_config_reference(text)
            (folder / name).write_text(text + "\n")  # the section file shows the current table too
        parts.append(text)
    Path("README.md").write_text("\n\n".join(parts) + "\n")


def with_config_reference(text: str) -> str:
    """Replace the table that follows the marker with the one the declarations give now."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from trainer.config import reference_markdown

    before, _, after = text.partition(CONFIG_TABLE)
    lines = after.lstrip("\n").split("\n")
    rest = "\n".join(lines[next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines)):])
    return f"{before}{CONFIG_TABLE}\n{reference_markdown()}\n{rest}"


if __name__ == "__main__":
    main()
