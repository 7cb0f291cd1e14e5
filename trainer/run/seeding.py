"""The one seeding rule: every random stream of a run is derived here from `config.seed`.

    from trainer.run.seeding import seeds
    s = seeds(config.seed, rank=0, update=0)
    torch.manual_seed(s.network); env.reset(seed=s.env); generator.manual_seed(s.sampling)

`update` is where a stream (re)starts: 0 for a fresh run, the checkpoint's update for a resumed
run that cannot restore its streams exactly (a Gymnasium env, another rank, a changed num_envs),
and the update a GIF is recorded at. Streams of different ranks and different restart points
never coincide, and the GIF env has its own streams, so recording a GIF never changes what is
learned.
"""

from __future__ import annotations

from dataclasses import dataclass

# Odd multipliers far apart, so that (seed, rank, update) triples do not map onto the same stream.
_UPDATE_STRIDE = 7919
_STREAM_STRIDE = 1_000_003


@dataclass(frozen=True)
class Seeds:
    network: int  # torch.manual_seed before the network is built: the same on every rank
    env: int  # the training env's construction and reset
    sampling: int  # the generator of action sampling and minibatch shuffling
    gif_env: int  # construction of the separate single GIF env
    gif: int  # the reset of the GIF episode recorded at `update`


def seeds(seed: int, rank: int = 0, update: int = 0) -> Seeds:
    """All seeds of rank `rank` for streams starting at `update` (0: a fresh run)."""
    restart = seed + _UPDATE_STRIDE * update
    return Seeds(
        network=seed,
        env=restart + rank,
        sampling=restart * _STREAM_STRIDE + _UPDATE_STRIDE * rank + 1,
        gif_env=seed + _STREAM_STRIDE,
        gif=seed + _STREAM_STRIDE + update,
    )
