"""Play Flappy Bird with an exported agent: onnxruntime picks the actions, pygame shows the game.

    python -m trainer export runs/<flappy run> --onnx flappy.onnx
    python examples/play_flappy_onnx.py flappy.onnx [--episodes 3] [--no-window]

The agent is only the .onnx file and onnxruntime: `session.run(["action"], {"obs": batch})`
with raw observations, exactly what the game observes (normalisation is inside the model).
The game here is RL Studio's Flappy Bird (its Gymnasium env, `FlappyBird-v0`); in your own
game you build the same numbers from your game state (the 8 floats, or 12 for `obs: lookahead`:
envs/flappy_bird.py says how) and call the session the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx file written by `python -m trainer export`")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--no-window", action="store_true", help="play without showing the game (as fast as it goes)")
    args = parser.parse_args()

    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    metadata = session.get_modelmeta().custom_metadata_map
    if metadata.get("env_name") not in (None, "flappy_bird", "FlappyBird-v0"):
        print(f"warning: this model was trained on {metadata['env_name']!r}, not Flappy Bird", file=sys.stderr)
    print(
        f"model: {args.model}, obs shape {json.loads(metadata.get('obs_shape', '[8]'))}, "
        f"trained for {metadata.get('global_step', '?')} steps"
    )

    import gymnasium

    import envs  # noqa: F401  (registers FlappyBird-v0)
    from envs.registry import played_env_kwargs

    # The game the model was trained on (its observation among the options), less the options that
    # only shaped training, e.g. the `hard_pipes` curriculum.
    options = played_env_kwargs("flappy_bird", json.loads(metadata.get("env_kwargs", "{}")))
    env = gymnasium.make("FlappyBird-v0", render_mode=None if args.no_window else "human", **options)
    try:
        for episode in range(args.episodes):
            obs, info = env.reset(seed=episode)
            total, done = 0.0, False
            while not done:
                action = session.run(["action"], {"obs": obs[None].astype(np.float32)})[0][0]
                obs, reward, terminated, truncated, info = env.step(int(action))
                total += reward
                done = terminated or truncated
            print(f"episode {episode + 1}: score {info['score']:.0f} (pipes), return {total:.1f}")
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
