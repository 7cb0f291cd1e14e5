"""DQN (trainer/algos/dqn.py): one update's loss and TD errors against a plain-Python computation
of the double-Q and the max target; it learns CartPole; a stopped (or killed) and resumed run ends
with the very weights of a straight run, and one resumed without its replay buffer says so; a
multi-rank setting is refused with a message, not a crash inside the launcher.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainer.algos.base import Progress, Setup
from trainer.config.checks import ConfigError
from trainer.config.validation import config_from_dict
from trainer.run.events import EventBus, read_events
from trainer.run.loop import TrainingSession, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_session(**overrides) -> TrainingSession:
    raw = {
        "algo": "dqn",
        "env_name": "cartpole",
        "num_envs": 4,
        "num_steps": 8,
        "hidden_sizes": [8],
        "mini_batch_size": 32,
        "buffer_size": 400,
        "learning_starts": 0,
        "gradient_steps": 1,
        "anneal_lr": False,
        "total_timesteps": 3200,
        "gif_interval": 0,
        "device": "cpu",
        "seed": 4,
    }
    return TrainingSession(config_from_dict({**raw, **overrides}), None, EventBus())


def parameters(network: nn.Module) -> list[torch.Tensor]:
    return [parameter.detach().clone() for parameter in network.parameters()]


# -- one update against plain Python ----------------------------------------------------------------


def plain_forward(network: nn.Module, obs: list[float]) -> list[float]:
    """Q(s, .) of an MLP QNetwork, one number at a time (no dueling head)."""
    assert network.value_head is None
    values = list(obs)
    for module in [*network.body, network.head]:
        if isinstance(module, nn.Linear):
            weight, bias = module.weight.tolist(), module.bias.tolist()
            values = [
                sum(w * v for w, v in zip(row, values, strict=True)) + b for row, b in zip(weight, bias, strict=True)
            ]
        elif isinstance(module, nn.ReLU):
            values = [max(0.0, v) for v in values]
        elif type(module).__name__ != "Flat":
            raise AssertionError(f"plain_forward does not know {module}")
    return values


def plain_update(online: nn.Module, target: nn.Module, batch, double_q: bool) -> tuple[list[float], list[float]]:
    """Each item's Q(s, a) and TD error Q(s, a) - (R + D * next value)."""
    q_taken, td_errors = [], []
    for i in range(len(batch.returns)):
        next_online = plain_forward(online, batch.next_obs[i].tolist())
        next_target = plain_forward(target, batch.next_obs[i].tolist())
        if double_q:  # the online network picks, the target network scores
            best = max(range(len(next_online)), key=next_online.__getitem__)
            next_value = next_target[best]
        else:
            next_value = max(next_target)
        target_value = float(batch.returns[i]) + float(batch.discounts[i]) * next_value
        q = plain_forward(online, batch.obs[i].tolist())[int(batch.actions[i])]
        q_taken.append(q)
        td_errors.append(q - target_value)
    return q_taken, td_errors


def weighted_loss(weights: list[float], td_errors: list[float]) -> float:
    return sum(w * e * e for w, e in zip(weights, td_errors, strict=True)) / len(td_errors)


@pytest.mark.parametrize("double_q", [True, False], ids=["double-q", "max"])
def test_one_update_matches_a_plain_python_target(double_q):
    session = small_session(mini_batch_size=64, n_step=3, gamma=0.9, use_per=True, double_q=double_q)
    config = session.config
    try:
        dqn, buffer = session.algorithm, session.algorithm.buffer
        obs = session.next_obs
        for update in range(1, 6):  # 160 steps of (nearly) random play into the buffer
            obs = dqn.collect(obs, Progress(update, 100, (update - 1) * 32, 1e-3))
        generator = torch.Generator().manual_seed(11)
        with torch.no_grad():  # a target network far from the online one: the two targets differ
            for parameter in dqn.target.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator))
        items = torch.arange(buffer.rows * buffer.num_envs)
        items = items[buffer.tree.get(items) > 0]
        buffer.update_priorities(items, torch.rand(len(items), generator=generator) * 3)  # unequal weights

        progress = Progress(update=6, num_updates=100, global_step=160, learning_rate=1e-3)
        beta = config.per_beta + (1 - config.per_beta) * 6 / 100
        replay = torch.Generator()
        replay.set_state(session.generator.get_state())
        batch = buffer.sample(config.mini_batch_size, replay, beta)  # what the update will draw
        online, target = copy.deepcopy(dqn.policy), copy.deepcopy(dqn.target)
        metrics = dqn.update(progress)
    finally:
        session.close()

    weights = batch.weights.tolist()
    q_taken, td_errors = plain_update(online, target, batch, double_q)
    _, other_errors = plain_update(online, target, batch, not double_q)
    # The batch exercises what the target must get right, and the two targets differ on it.
    assert 0.0 in batch.discounts.tolist() and 0.9**3 in [pytest.approx(d) for d in batch.discounts.tolist()]
    assert min(weights) < 0.9
    assert abs(weighted_loss(weights, other_errors) - weighted_loss(weights, td_errors)) > 0.05 * weighted_loss(
        weights, td_errors
    )

    assert metrics["gradient_steps"] == 1
    assert metrics["value_loss"] == pytest.approx(weighted_loss(weights, td_errors), rel=1e-4)
    assert metrics["td_error_mean"] == pytest.approx(sum(map(abs, td_errors)) / len(td_errors), rel=1e-4)
    assert metrics["q_value_mean"] == pytest.approx(sum(q_taken) / len(q_taken), rel=1e-4, abs=1e-6)
    # Each item's new priority is its own |TD error| (items drawn twice: either draw's).
    indices = batch.indices.tolist()
    for i, index in enumerate(indices):
        if indices.count(index) == 1:
            expected = (abs(td_errors[i]) + 1e-6) ** config.per_alpha
            assert float(buffer.tree.get(torch.tensor([index]))) == pytest.approx(expected, rel=1e-4), i


# -- the target network ----------------------------------------------------------------------------


def test_the_target_network_is_copied_every_target_update_interval_steps():
    session = small_session(tau=1.0, target_update_interval=64)  # 32 steps per update
    try:
        dqn, obs = session.algorithm, session.next_obs
        for update in range(1, 6):
            target_before = parameters(dqn.target)
            obs = dqn.collect(obs, Progress(update, 100, (update - 1) * 32, 1e-3))
            dqn.update(Progress(update, 100, (update - 1) * 32, 1e-3))
            online, target = parameters(dqn.policy), parameters(dqn.target)
            if update % 2 == 0:  # after 64, 128 steps
                assert all(torch.equal(t, o) for t, o in zip(target, online, strict=True)), update
            else:
                assert all(torch.equal(t, b) for t, b in zip(target, target_before, strict=True)), update
                assert not all(torch.equal(t, o) for t, o in zip(target, online, strict=True)), update
    finally:
        session.close()


def test_polyak_moves_the_target_tau_of_the_way_after_each_gradient_step():
    session = small_session(tau=0.25)
    try:
        dqn = session.algorithm
        dqn.collect(session.next_obs, Progress(1, 100, 0, 1e-3))
        target_before = parameters(dqn.target)
        dqn.update(Progress(1, 100, 0, 1e-3))
        online = parameters(dqn.policy)
        for after, before, followed in zip(parameters(dqn.target), target_before, online, strict=True):
            torch.testing.assert_close(after, before + 0.25 * (followed - before))
            assert not torch.equal(after, before)
    finally:
        session.close()


# -- it learns -------------------------------------------------------------------------------------


# A sink: the best mean return of the last 100 episodes, and a stop once it reaches the goal.
class BestRecentReturn:
    def __init__(self, goal: float):
        self.goal, self.best = goal, float("-inf")

    def __call__(self, event):
        if event["type"] == "metrics" and event["recent_return_mean"] is not None:
            self.best = max(self.best, event["recent_return_mean"])

    def reached(self) -> bool:
        return self.best >= self.goal


# Measured on a shared 2-core machine, one torch thread: seeds 1-16 all passed a mean of 400 over
# the last 100 episodes, between 93k and 204k steps (seeds 1 / 2: 104k / 150k, 7-18 s). With gamma
# 0.99 (16 envs x 8 steps) seeds 2 and 3 of 1-6 stayed at 310-340 after 100k steps, and with n_step 1
# too seed 1 stayed near 270.
LEARNS_CARTPOLE = {
    "algo": "dqn",
    "env_name": "CartPole-v1",
    "num_envs": 32,
    "num_steps": 8,
    "gradient_steps": 16,  # one gradient step per 16 env steps: env steps are cheap, gradient steps are not
    "learning_rate": 1e-3,
    "anneal_lr": False,
    "mini_batch_size": 128,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "target_update_interval": 1000,
    "n_step": 3,
    "gamma": 0.995,  # the cart drifts off over hundreds of steps: a long horizon sees it coming
    "exploration_fraction": 0.1,
    "exploration_final_eps": 0.01,
    "hidden_sizes": [64, 64],
    "total_timesteps": 250_000,
    "gif_interval": 0,
    "checkpoint": {"interval": 0},
    "device": "cpu",
}


@pytest.mark.parametrize("seed", [1, 2])
def test_dqn_learns_cartpole(tmp_path, seed):
    recorder = BestRecentReturn(goal=400)
    result = train({**LEARNS_CARTPOLE, "seed": seed}, tmp_path / "run", sinks=[recorder], should_stop=recorder.reached)
    assert recorder.best >= 400, (
        f"seed {seed}: the mean return of the last 100 episodes only reached {recorder.best:.1f}"
    )
    assert result.step <= LEARNS_CARTPOLE["total_timesteps"]


# -- exact resume -----------------------------------------------------------------------------------

UPDATES = 12  # of 16 steps (4 envs x 4); the ring of 16 rows wraps before the stop at update 6


def resume_config(**overrides):
    raw = {
        "algo": "dqn",
        "env_name": "cartpole",
        "num_envs": 4,
        "num_steps": 4,
        "hidden_sizes": [16],
        "buffer_size": 64,
        "mini_batch_size": 32,
        "learning_starts": 48,
        "gradient_steps": 2,
        "target_update_interval": 48,  # a hard copy every 3 updates: one falls on each side of the stop
        "n_step": 3,
        "use_per": True,
        "exploration_fraction": 0.5,
        "total_timesteps": 16 * UPDATES,
        "gif_interval": 0,
        "device": "cpu",
        "seed": 9,
        "checkpoint": {"interval": 3, "keep": 5},
    }
    raw.update(overrides)
    return config_from_dict(raw)


def stop_after(updates: int):
    seen = []

    def sink(event):
        if event["type"] == "metrics":
            seen.append(event["step"])

    return sink, lambda: len(seen) >= updates


def assert_same_weights(first, second):
    first, second = first.state_dict(), second.state_dict()
    assert first.keys() == second.keys()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name


@pytest.mark.parametrize("tau", [1.0, 0.5], ids=["hard-copy", "polyak"])
def test_stopped_and_resumed_run_equals_straight_run(tmp_path, tau):
    config = resume_config(tau=tau)
    straight = train(config, tmp_path / "straight")
    assert straight.last_metrics["gradient_steps"] == 2  # it learned

    sink, stop = stop_after(UPDATES // 2)
    stopped = train(config, tmp_path / "resumed", sinks=[sink], should_stop=stop)
    assert stopped.status == "stopped" and stopped.step == 16 * UPDATES // 2
    resumed = train(config, tmp_path / "resumed", resume=True)
    assert resumed.status == "finished" and resumed.step == straight.step
    assert_same_weights(straight.policy, resumed.policy)
    log = (tmp_path / "resumed" / "train.log").read_text()
    assert "replay buffer" not in log  # nothing was lost


def test_killed_and_resumed_run_equals_straight_run(tmp_path):
    """A process that died after its checkpoint at step 96 (the later files never written)."""
    config = resume_config()
    straight = train(config, tmp_path / "straight")
    train(config, tmp_path / "killed")
    for later in (9, 12):
        (tmp_path / "killed" / "checkpoints" / f"ckpt_{16 * later}.pth").unlink()
    (tmp_path / "killed" / "cartpole_dqn_final.pth").unlink()
    resumed = train(config, tmp_path / "killed", resume=True)
    assert_same_weights(straight.policy, resumed.policy)


def test_a_resume_without_the_saved_buffer_says_it_was_lost(tmp_path):
    config = resume_config(save_buffer=False)
    straight = train(config, tmp_path / "straight")
    sink, stop = stop_after(UPDATES // 2)
    train(config, tmp_path / "resumed", sinks=[sink], should_stop=stop)
    resumed = train(config, tmp_path / "resumed", resume=True)

    lost = "resumed without the replay buffer (save_buffer: false): the 64 transitions it held are lost"
    assert lost in (tmp_path / "resumed" / "train.log").read_text()
    logs = [e for e in read_events(tmp_path / "resumed" / "metrics.jsonl") if e["type"] == "log"]
    assert any(lost in event["message"] for event in logs)
    # The buffer mattered: without it the run learns something else.
    assert any(
        not torch.equal(tensor, resumed.policy.state_dict()[name])
        for name, tensor in straight.policy.state_dict().items()
    )


# -- one process only -------------------------------------------------------------------------------

MULTI_RANK_SETTINGS = [{"nproc_per_node": 2}, {"gpu_ids": [0, 1]}, {"max_nodes": 2}]


@pytest.mark.parametrize("setting", MULTI_RANK_SETTINGS, ids=lambda setting: next(iter(setting)))
def test_a_multi_rank_setting_is_refused_when_the_config_is_read(setting):
    """Refused before any process starts, naming the key: not a rank crashing inside the elastic
    launcher, restarted max_restarts times, under a screen of launcher tracebacks."""
    with pytest.raises(ConfigError) as refused:
        config_from_dict({"algo": "dqn", **setting})
    message = str(refused.value)
    assert "dqn" in message and next(iter(setting)) in message and "replay buffer" in message


@pytest.mark.parametrize("ranks", [["--set", "nproc_per_node=2"], ["--nproc", "2"]], ids=["nproc_per_node", "--nproc"])
def test_the_cli_refuses_dqn_on_two_ranks_at_once(tmp_path, capfd, ranks):
    from trainer.__main__ import main

    run_dir = tmp_path / "run"
    # max_restarts 0: were the ranks started, they would fail once, not four times.
    settings = ["--set", "algo=dqn", "--set", "device=cpu", "--set", "max_restarts=0", "--run-dir", str(run_dir)]
    code = main(settings + ranks)
    error = capfd.readouterr().err
    assert code == 2, error[-2000:]
    assert "dqn" in error and "nproc_per_node" in error and "Traceback" not in error, error[-2000:]
    assert not run_dir.exists()


ONE_PROCESS = "algo dqn learns in one process: its replay buffer is not shared between ranks"


def test_dqn_built_for_several_ranks_says_why_it_cannot_run():
    config = config_from_dict({"algo": "dqn", "device": "cpu"})
    setup = Setup(config, None, torch.device("cpu"), {}, torch.Generator(), reduce_mean=lambda tensor: None)
    from trainer.algos.dqn import DQN

    with pytest.raises(ValueError, match=ONE_PROCESS):
        DQN(setup)


def _dqn_rank(rank: int, port: int, run_dir: str, out_dir: str) -> None:
    import os
    from pathlib import Path

    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    from trainer.run.ranks import shutdown_distributed

    try:
        train({"algo": "dqn", "env_name": "cartpole", "num_envs": 2, "backend": "gloo", "device": "cpu"}, run_dir)
    except ValueError as error:
        Path(out_dir, f"rank{rank}.txt").write_text(str(error))
    finally:
        shutdown_distributed()


def test_ranks_started_by_torchrun_fail_with_the_reason(tmp_path):
    """Ranks that torchrun starts itself (no config key says there are two): each refuses with the
    algorithm's message, which rank 0's run log carries."""
    import torch.multiprocessing as mp

    from trainer.cluster.launch import free_port

    mp.start_processes(
        _dqn_rank, args=(free_port(), str(tmp_path / "run"), str(tmp_path)), nprocs=2, join=True, start_method="spawn"
    )
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text().startswith(ONE_PROCESS)
    assert ONE_PROCESS in (tmp_path / "run" / "train.log").read_text()
