"""Two processes on the CPU with the gloo backend, as torchrun would start them: gradients are
all-reduced so both ranks end with identical weights, each rank plays its own envs, and only
rank 0 writes the run directory."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
TINY = {"env_name": "cartpole", "num_envs": 8, "num_steps": 16, "mini_batch_size": 32, "update_epochs": 2,
        "total_timesteps": 2 * 8 * 16 * 3, "gif_interval": 0, "backend": "gloo", "device": "cpu", "seed": 5}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, run_dir: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from trainer.distributed import shutdown_distributed
    from trainer.loop import train

    result = train(dict(TINY), run_dir)
    torch.save({"state": result.policy.state_dict(), "step": result.step,
                "final_model": str(result.final_model) if result.final_model else None},
               Path(out_dir) / f"rank{rank}.pt")
    shutdown_distributed()


def test_two_ranks_stay_identical_and_rank0_writes(tmp_path):
    run_dir, out_dir = tmp_path / "run", tmp_path / "out"
    out_dir.mkdir()
    mp.start_processes(_rank_main, args=(2, free_port(), str(run_dir), str(out_dir)), nprocs=2, join=True,
                       start_method="spawn")
    rank0 = torch.load(out_dir / "rank0.pt", weights_only=True)
    rank1 = torch.load(out_dir / "rank1.pt", weights_only=True)
    assert rank0["step"] == rank1["step"] == TINY["total_timesteps"]   # steps of both ranks together
    for name, tensor in rank0["state"].items():
        assert torch.equal(tensor, rank1["state"][name]), name
    assert rank0["final_model"] and rank1["final_model"] is None
    assert (run_dir / "cartpole_ppo_final.pth").is_file()
    from trainer.events import read_events

    metrics = [event for event in read_events(run_dir / "metrics.jsonl") if event["type"] == "metrics"]
    assert [event["step"] for event in metrics] == [256, 512, 768]     # one line per update, not per rank
    start = read_events(run_dir / "metrics.jsonl")[0]
    assert start["world_size"] == 2


@pytest.mark.slow
def test_torchrun_cli(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(free_port())]
    completed = subprocess.run(
        torchrun + ["-m", "trainer", "--set", "num_envs=8", "--set", "num_steps=16", "--set", "gif_interval=0",
                    "--set", "total_timesteps=1024", "--set", "backend=gloo", "--set", "device=cpu",
                    "--runs-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert completed.returncode == 0, completed.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "cartpole_ppo_final.pth").is_file()


def test_every_rank_and_restart_point_draws_its_own_random_streams():
    from trainer.seeding import seeds

    drawn = [seeds(5, rank, update) for rank in range(4) for update in (0, 7, 8)]
    assert len({s.env for s in drawn}) == len(drawn)               # no two ranks replay the same episodes
    assert len({s.sampling for s in drawn}) == len(drawn)
    assert {s.network for s in drawn} == {5}                       # the same initial weights everywhere
    assert seeds(5, 0, 0).gif_env not in {s.env for s in drawn}    # the GIF env is not a training env
