"""Registers the single-env Gymnasium versions of the built-in games.

After `import envs`, `gymnasium.make("FlappyBird-v0", render_mode="rgb_array")` and
`gymnasium.make("Snake-v0")` work like any Gymnasium env (and so with any RL library).
`FlappyBirdPygame-v0` is registered too, as an alias some guides use.
"""

from __future__ import annotations

import gymnasium

_SINGLE_ENVS = {
    "FlappyBird-v0": "envs.single:FlappyBirdEnv",
    "FlappyBirdPygame-v0": "envs.single:FlappyBirdEnv",
    "Snake-v0": "envs.single:SnakeEnv",
}


def register_gymnasium_ids() -> None:
    """Register our ids with Gymnasium (idempotent)."""
    for env_id, entry_point in _SINGLE_ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


register_gymnasium_ids()
