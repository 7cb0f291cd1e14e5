"""Environment speed benchmark (steps/s, random actions): see envs/bench.py.

    python benchmarks/envs.py [--device cuda] [--num-envs 1 64 1024 16384] [--no-gym]
    python -m benchmarks.envs ...   or   python -m envs.bench ...
"""
import os
import sys

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.bench import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
