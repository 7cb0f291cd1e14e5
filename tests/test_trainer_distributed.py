"""Two processes on the CPU with the gloo backend, as torchrun would start them: gradients are
all-reduced so both ranks end with identical weights, two ranks take the same step as one rank
with their batches together, each rank plays its own envs, and only rank 0 writes the run
directory; the writer resumes exactly whatever rank number it gets; a run rerun under an elastic
launcher (a restarted PyTorchJob pod) continues."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from trainer.cluster.launch import free_port

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "env_name": "cartpole",
    "num_envs": 8,
    "num_steps": 16,
    "mini_batch_size": 32,
    "update_epochs": 2,
    "total_timesteps": 2 * 8 * 16 * 3,
    "gif_interval": 0,
    "backend": "gloo",
    "device": "cpu",
    "seed": 5,
}


UPDATE = {
    "update_epochs": 2,
    "clip_coef": 0.2,
    "clip_vloss": False,
    "norm_adv": False,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "target_kl": None,
    "unclipped": False,
    "use_per": False,
    "per_alpha": 0.6,
    "per_beta": 0.4,
}


def _update(policy, batch, mini_batch_size, reduce=None):
    from trainer.algos.ppo import Adam, UpdateSettings, ppo_update

    optimizer = Adam(policy)
    ppo_update(
        policy,
        optimizer,
        batch,
        UpdateSettings(mini_batch_size=mini_batch_size, **UPDATE),
        3e-3,
        torch.Generator().manual_seed(0),
        reduce,
    )
    return {name: tensor.clone() for name, tensor in policy.state_dict().items()}


def _rank_main(rank: int, world_size: int, port: int, run_dir: str, out_dir: str) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    from trainer.run.loop import train
    from trainer.run.ranks import setup_distributed, shutdown_distributed

    _update_on_half(rank, setup_distributed("gloo", "cpu"), Path(out_dir))
    result = train(dict(TINY), run_dir)
    torch.save(
        {
            "state": result.policy.state_dict(),
            "step": result.step,
            "final_model": str(result.final_model) if result.final_model else None,
        },
        Path(out_dir) / f"rank{rank}.pt",
    )
    shutdown_distributed()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One pair of gloo processes for the tests below (starting processes is the slow part):
    each takes one update on its half of a fixed batch, then trains TINY into one run folder."""
    out_dir = tmp_path_factory.mktemp("two_ranks")
    _write_update_data(out_dir / "data.pt")
    mp.start_processes(
        _rank_main, args=(2, free_port(), str(out_dir / "run"), str(out_dir)), nprocs=2, join=True, start_method="spawn"
    )
    return out_dir


def test_two_ranks_stay_identical_and_rank0_writes(two_ranks):
    run_dir = two_ranks / "run"
    rank0 = torch.load(two_ranks / "rank0.pt", weights_only=True)
    rank1 = torch.load(two_ranks / "rank1.pt", weights_only=True)
    assert rank0["step"] == rank1["step"] == TINY["total_timesteps"]  # steps of both ranks together
    for name, tensor in rank0["state"].items():
        assert torch.equal(tensor, rank1["state"][name]), name
    assert rank0["final_model"] and rank1["final_model"] is None
    assert (run_dir / "cartpole_ppo_final.pth").is_file()
    from trainer.run.events import read_events

    metrics = [event for event in read_events(run_dir / "metrics.jsonl") if event["type"] == "metrics"]
    assert [event["step"] for event in metrics] == [256, 512, 768]  # one line per update, not per rank
    start = read_events(run_dir / "metrics.jsonl")[0]
    assert start["world_size"] == 2


@pytest.mark.slow
def test_torchrun_cli(tmp_path):
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
    ]
    completed = subprocess.run(
        torchrun
        + [
            "-m",
            "trainer",
            "--set",
            "num_envs=8",
            "--set",
            "num_steps=16",
            "--set",
            "gif_interval=0",
            "--set",
            "total_timesteps=1024",
            "--set",
            "backend=gloo",
            "--set",
            "device=cpu",
            "--runs-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "cartpole_ppo_final.pth").is_file()


def _write_update_data(path: Path) -> None:
    """A network and a batch of 256 samples whose ratios fall inside and outside the clip range."""
    import gymnasium

    from trainer.nets.build import build_policy
    from trainer.nets.spec import make_policy_spec

    spec = make_policy_spec("ppo-small", gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2), False)
    torch.manual_seed(3)
    policy = build_policy(spec)
    size = 256
    obs = torch.randn(size, 4)
    with torch.no_grad():
        actions = torch.randint(0, 2, (size,))
        old_log_probs = policy.score(obs, actions)[0] + 0.3 * torch.randn(size)
    torch.save(
        {
            "spec": spec,
            "state": policy.state_dict(),
            "batch": [obs, actions, old_log_probs, torch.randn(size), torch.randn(size), torch.randn(size)],
        },
        path,
    )


def _load_update_data(path: Path, rows: slice = slice(None)):
    from trainer.algos.ppo import UpdateBatch
    from trainer.nets.build import build_policy

    saved = torch.load(path, weights_only=True)
    policy = build_policy(saved["spec"])
    policy.load_state_dict(saved["state"])
    return policy, UpdateBatch(*(tensor[rows] for tensor in saved["batch"])), saved["state"]


def _update_on_half(rank: int, context, out_dir: Path) -> None:
    """One rank's update on its half of the batch, gradients averaged with the other rank's."""
    half = 128
    policy, batch, _ = _load_update_data(out_dir / "data.pt", slice(rank * half, (rank + 1) * half))
    torch.save(_update(policy, batch, half, context.all_reduce_mean_), out_dir / f"update{rank}.pt")


def test_two_ranks_take_the_step_one_rank_takes_with_both_batches(two_ranks):
    """Data parallelism is exact: the gradient of the mean loss over 2B samples is the mean of
    the two ranks' gradients over B each (one minibatch per epoch, advantages not normalised:
    with `norm_adv` each rank normalises its own minibatch, a small, intended difference)."""
    policy, batch, start = _load_update_data(two_ranks / "data.pt")
    one_rank = _update(policy, batch, 256)
    policy, half_batch, _ = _load_update_data(two_ranks / "data.pt", slice(0, 128))
    half_only = _update(policy, half_batch, 128)
    for rank in (0, 1):
        two_ranks_update = torch.load(two_ranks / f"update{rank}.pt", weights_only=True)
        for name, tensor in one_rank.items():
            torch.testing.assert_close(two_ranks_update[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert max((one_rank[name] - start[name]).abs().max().item() for name in start) > 1e-3  # it moved
    assert any(not torch.allclose(half_only[name], one_rank[name], rtol=1e-5, atol=1e-6) for name in start)


def test_the_writer_resumes_exactly_whatever_its_rank(tmp_path):
    """A re-formed cluster can give the master's rank (the writer, whose env state the checkpoint
    holds) any rank number: it continues its own episodes exactly, not only as rank 0."""
    from trainer.config.validation import config_from_dict
    from trainer.run.checkpoint import latest_checkpoint
    from trainer.run.events import EventBus
    from trainer.run.loop import TrainingSession, train
    from trainer.run.resume import restore

    config = config_from_dict({**TINY, "total_timesteps": 8 * 16 * 2, "checkpoint": {"interval": 1}})
    train(config, tmp_path / "run")
    path, payload = latest_checkpoint(tmp_path / "run" / "checkpoints")
    session = TrainingSession(config, tmp_path / "run", EventBus())
    session.rank = 1  # still the writer (is_main), under another rank number
    try:
        restore(session, payload, path)
        assert torch.equal(session.next_obs, payload["next_obs"])
        assert torch.equal(session.generator.get_state(), payload["rng"]["sampling"])
    finally:
        session.close()


def test_a_run_rerun_under_an_elastic_launcher_continues(tmp_path, monkeypatch):
    """torchrun and a restarted PyTorchJob pod run the same command again (`--run-dir` fixed, as in
    deploy/k8s): the run continues from its checkpoint instead of the folder being refused."""
    from trainer.__main__ import main
    from trainer.run.events import read_events

    command = [
        "--set",
        "num_envs=8",
        "--set",
        "num_steps=16",
        "--set",
        "gif_interval=0",
        "--set",
        "device=cpu",
        "--set",
        "checkpoint.interval=1",
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
    ]
    assert main(command + ["--set", "total_timesteps=256"]) == 0
    assert main(command + ["--set", "total_timesteps=512"]) == 2  # by hand: refused, not overwritten
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "pytorchjob")  # what torchrun sets for its ranks
    assert main(command + ["--set", "total_timesteps=512"]) == 0
    events = read_events(tmp_path / "run" / "metrics.jsonl")
    assert [event["step"] for event in events if event["type"] == "metrics"] == [128, 256, 384, 512]
    assert [event["resumed_from_step"] for event in events if event["type"] == "start"] == [None, 256]


def test_every_rank_and_restart_point_draws_its_own_random_streams():
    from trainer.run.seeding import seeds

    drawn = [seeds(5, rank, update) for rank in range(4) for update in (0, 7, 8)]
    assert len({s.env for s in drawn}) == len(drawn)  # no two ranks replay the same episodes
    assert len({s.sampling for s in drawn}) == len(drawn)
    assert {s.network for s in drawn} == {5}  # the same initial weights everywhere
    assert seeds(5, 0, 0).gif_env not in {s.env for s in drawn}  # the GIF env is not a training env
