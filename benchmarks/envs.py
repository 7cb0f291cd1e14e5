"""Environment speed benchmark (steps/s, random actions): envs/bench.py's measurements, and
`--json FILE` to keep them (written with the run folder's atomic writer: benchmarks may import
the trainer, envs may not).

    python benchmarks/envs.py [--device cuda] [--num-envs 1 64 1024 16384] [--no-gym] [--json out.json]
    python -m benchmarks.envs ...   or   python -m envs.bench ... (the table only)
"""

import json
import os
import sys
from dataclasses import asdict

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.bench import build_parser, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("python -m benchmarks.envs")
    parser.add_argument("--json", help="also write the measurements to this JSON file")
    args = parser.parse_args(argv)
    measurements = run(args)
    if args.json:
        from trainer.run.files import atomic_write

        atomic_write(args.json, json.dumps([asdict(m) for m in measurements], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
