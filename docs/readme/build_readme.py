"""The old command, kept working: `python docs/readme/build_readme.py` is `python docs/build.py`.

The README's sections became the pages of the docs site (docs/*.md); docs/build.py refreshes
their generated tables (and GENERATED_TABLES is declared there).
"""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[0] = str(Path(__file__).resolve().parents[1] / "build.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
