"""Assemble README.md from the sections in docs/readme/ (run from the repository root).

Each area keeps its README section in its own file so that engineers working on different
layers do not edit one file at once:  python docs/readme/build_readme.py
"""
from pathlib import Path

SECTIONS = ["_header.md", "studio.md", "trainer.md", "envs.md", "benchmarks.md", "_footer.md"]


def main() -> None:
    folder = Path(__file__).parent
    parts = []
    for name in SECTIONS:
        text = (folder / name).read_text().strip()
        # Links in the sections are written relative to docs/readme/; the README sits at the root.
        text = text.replace("](../../", "](")
        parts.append(text)
    Path("README.md").write_text("\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
