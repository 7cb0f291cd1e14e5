"""Steps/s of a whole training run on the shipped CartPole config, for A/B runs of two trees:

    cd <tree> && python <this file>      # run it from each tree's root in turn, alternating

It imports the trainer of the folder it is run from (so one copy of this file times any tree).
One torch thread, no GIFs, 393,216 steps (96 updates of 128 x 32); prints the wall time of
train() and the steps per wall second.
"""

import os
import sys
import tempfile
import time

sys.path[0] = os.getcwd()  # the tree being timed, not this file's folder (benchmarks/envs.py would shadow envs)
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import torch  # noqa: E402

from trainer import load_config, train  # noqa: E402

STEPS = 393_216


def main() -> None:
    torch.set_num_threads(1)
    config = load_config("configs/cartpole.yaml", [f"total_timesteps={STEPS}", "gif_interval=0", "device=cpu"])
    start = time.perf_counter()
    train(config, os.path.join(tempfile.mkdtemp(), "run"))
    elapsed = time.perf_counter() - start
    print(f"{elapsed:.2f} s wall, {STEPS / elapsed:,.0f} steps/s")


if __name__ == "__main__":
    main()
