"""Training on several processes with torch.distributed (torchrun), CPU (gloo) or GPUs (nccl).

    torchrun --nproc_per_node 2 -m trainer --config configs/cartpole.yaml
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
             --nproc_per_node 4 -m trainer --config configs/flappy_bird.yaml

Every rank (process) runs its own `num_envs` envs seeded `seed + rank`, computes gradients on
its own rollouts, and all ranks average their gradients with one all-reduce per gradient step,
so the weights stay identical everywhere (rank 0's initial weights are broadcast first). The
batch per update is therefore `world_size x batch_size`, and `total_timesteps` counts the
steps of all ranks together. Observation / reward statistics are merged across ranks. Rank 0
alone writes the run directory (config, events, checkpoints, GIFs, the final model) and polls
the stop signal, which it shares with the others once per update.

Under the elastic launcher (`--nproc`, `python -m trainer master` / `worker`, trainer/cluster/launch.py)
the rank that writes is the first rank on the master's machine (`main_rank`, found with one
all-reduce), because c10d rendezvous numbers machines by host name, not by who is the master. A
peer that dies makes the collectives fail within `COLLECTIVE_TIMEOUT` instead of gloo's 30
minutes, so the elastic agent can re-form the ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
from torch import Tensor, nn

# Set by the master command (trainer/cluster/launch.py) in its own environment, so only its ranks have it.
WRITER_ENV = "RL_STUDIO_WRITER"
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


@dataclass
class DistributedContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    main_rank: int = 0  # the rank that writes the run folder (the master's first rank)

    @property
    def is_main(self) -> bool:
        return self.rank == self.main_rank

    def all_reduce_sum_(self, tensor: Tensor) -> Tensor:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def all_reduce_mean_(self, tensor: Tensor) -> Tensor:
        self.all_reduce_sum_(tensor)
        tensor.div_(self.world_size)
        return tensor

    def broadcast_module_(self, module: nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers."""
        import torch.distributed as dist

        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=self.main_rank)

    def broadcast_value(self, value):
        """The main rank's `value` on every rank, as JSON and raw tensor bytes (trainer/run/wire.py):
        never a pickle, so a peer can send wrong numbers at worst, never code. gloo sends from
        host memory, nccl only between GPUs (each rank's own)."""
        from trainer.run.wire import broadcast_value

        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else "cpu"
        return broadcast_value(value, self.main_rank, self.rank, device)

    def any_rank(self, flag: bool, device: torch.device) -> bool:
        """True on every rank when `flag` is True on at least one (used for the stop signal)."""
        tensor = torch.tensor([1.0 if flag else 0.0], device=device)
        self.all_reduce_sum_(tensor)
        return bool(tensor.item() > 0)

    def merge_episode_numbers(
        self, totals: list[float], recent: list[float | None], device: torch.device
    ) -> tuple[list[float], list[float | None]]:
        """Sum the episode totals (count, sums of return / length / score) of all ranks; average
        their recent-100 means over the ranks that have any (one all-reduce)."""
        packed = torch.tensor(
            totals
            + [value if value is not None else 0.0 for value in recent]
            + [1.0 if recent[0] is not None else 0.0],
            dtype=torch.float64,
            device=device,
        )
        self.all_reduce_sum_(packed)
        host = packed.tolist()
        ranks_with_recent = host[-1]
        merged_recent = [
            value / ranks_with_recent if ranks_with_recent else None
            for value in host[len(totals) : len(totals) + len(recent)]
        ]
        return host[: len(totals)], merged_recent

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()


def launched_distributed() -> bool:
    """True when started by torchrun (or torch.distributed.launch) with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup_distributed(backend: str = "auto", device_type: str | None = None) -> DistributedContext | None:
    """Join the process group described by torchrun's environment variables (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT); None when running as a single process."""
    if not launched_distributed():
        return None
    import torch.distributed as dist

    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "auto":
        backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise RuntimeError("backend nccl needs CUDA GPUs; use backend: gloo (or auto) on CPU machines")
    if not dist.is_initialized():
        missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
        if missing:
            raise RuntimeError(
                f"WORLD_SIZE is set but {', '.join(missing)} is not: start distributed runs "
                f"with torchrun (e.g. torchrun --nproc_per_node 2 -m trainer --config ...)"
            )
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    return DistributedContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        backend=dist.get_backend(),
        main_rank=_writer_rank(rank, world_size, local_rank, device_type),
    )


def _writer_rank(rank: int, world_size: int, local_rank: int, device_type: str) -> int:
    """The lowest rank that is local rank 0 of the master (WRITER_ENV); 0 when no rank is (torchrun)."""
    import torch.distributed as dist

    writer = os.environ.get(WRITER_ENV) == "1" and local_rank == 0
    device = torch.device("cpu")
    if device_type == "cuda":  # nccl: each rank on its own GPU already (pick_device settles gpu_ids later)
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    candidate = torch.tensor([rank if writer else world_size], dtype=torch.int64, device=device)
    dist.all_reduce(candidate, op=dist.ReduceOp.MIN)
    found = int(candidate.item())
    return found if found < world_size else 0


def continues_its_run(context: DistributedContext | None, run_dir: Path, config) -> bool:
    """Under an elastic launcher a rank that finds its run folder already holding the run is an
    elastic restart, a re-formation or a restarted pod (a PyTorchJob reruns the same command):
    it continues the run instead of refusing the folder. The writer looks at its disk and tells
    the others (ranks on other machines may have no copy of the folder)."""
    from trainer.run.layout import holds_a_run

    if context is None:
        return holds_a_run(run_dir, config)
    return bool(context.broadcast_value(holds_a_run(run_dir, config) if context.is_main else None))


def shutdown_distributed() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
