"""V-trace (trainer/algos/vtrace.py) against plain Python: the paper's sum for v_s (Espeholt et al.
2018, eq. 1) over random batches with episode ends and time limits; on-policy it is the n-step
return bootstrapped where the batch or a time limit cuts the episode; clipped ratios."""

from __future__ import annotations

import math
import random

import pytest
import torch

from trainer.algos.vtrace import vtrace

GAMMA = 0.9


def random_batch(steps: int, envs: int, seed: int, ratio_spread: float = 1.0):
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    ends = torch.rand(steps, envs, generator=generator)
    terminated = ends < 0.15
    truncated = (ends > 0.85) | ((ends > 0.1) & (ends < 0.15))  # some steps both: the game's end wins
    behaviour = normal(steps, envs) - 1.0
    return {
        "behaviour_log_probs": behaviour,
        "target_log_probs": behaviour + ratio_spread * normal(steps, envs),
        "rewards": normal(steps, envs),
        "values": normal(steps, envs),
        "bootstrap_value": normal(envs),
        "terminated": terminated,
        "truncated": truncated,
        "final_values": normal(steps, envs),
    }


def reference(batch, gamma: float, rho_bar: float, c_bar: float):
    """v_s = V(x_s) + sum_{t >= s} (prod_{i=s}^{t-1} g_i c_i) delta_t, one env and one step at a time;
    A_s = rho_s (r_s + g_s v_{s+1} - V(x_s))."""
    steps, envs = batch["rewards"].shape
    vs = [[0.0] * envs for _ in range(steps)]
    advantages = [[0.0] * envs for _ in range(steps)]
    for env in range(envs):

        def at(name, t, env=env):
            return batch[name][t, env].item()

        ratio = [math.exp(at("target_log_probs", t) - at("behaviour_log_probs", t)) for t in range(steps)]
        rho = [min(rho_bar, r) for r in ratio]
        c = [min(c_bar, r) for r in ratio]
        ended = [at("terminated", t) or at("truncated", t) for t in range(steps)]
        discount = [0.0 if ended[t] else gamma for t in range(steps)]
        reward = [
            at("rewards", t) + (gamma * at("final_values", t) if at("truncated", t) and not at("terminated", t) else 0)
            for t in range(steps)
        ]
        value = [at("values", t) for t in range(steps)] + [batch["bootstrap_value"][env].item()]
        delta = [rho[t] * (reward[t] + discount[t] * value[t + 1] - value[t]) for t in range(steps)]
        for s in range(steps):
            total, weight = value[s], 1.0
            for t in range(s, steps):
                total += weight * delta[t]
                weight *= discount[t] * c[t]
            vs[s][env] = total
        for s in range(steps):
            next_vs = vs[s + 1][env] if s + 1 < steps else value[steps]
            advantages[s][env] = rho[s] * (reward[s] + discount[s] * next_vs - value[s])
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(advantages, dtype=torch.float64)


@pytest.mark.parametrize(
    "steps, envs, seed, rho_bar, c_bar",
    [(7, 3, 0, 1.0, 1.0), (20, 5, 1, 1.0, 0.8), (16, 4, 2, 2.0, 1.0), (9, 2, 3, 0.5, 0.5), (1, 6, 4, 1.0, 1.0)],
)
def test_targets_and_advantages_equal_the_papers_sum(steps, envs, seed, rho_bar, c_bar):
    batch = random_batch(steps, envs, seed)
    if steps > 1:  # the batch has both kinds of episode end
        assert batch["terminated"].any() and (batch["truncated"] & ~batch["terminated"]).any()
    vs, advantages = vtrace(**batch, gamma=GAMMA, rho_bar=rho_bar, c_bar=c_bar)
    expected_vs, expected_advantages = reference(batch, GAMMA, rho_bar, c_bar)
    torch.testing.assert_close(vs, expected_vs)
    torch.testing.assert_close(advantages, expected_advantages)


def n_step_returns(batch, gamma: float):
    """On-policy: the discounted rewards to the episode's end, plus gamma^k V of where the batch
    (V(x_T)) or a time limit (V(final observation)) cut it; nothing after the game ended it."""
    steps, envs = batch["rewards"].shape
    returns = torch.zeros(steps, envs, dtype=torch.float64)
    for env in range(envs):
        for s in range(steps):
            total, weight = 0.0, 1.0
            for t in range(s, steps):
                total += weight * batch["rewards"][t, env].item()
                if batch["terminated"][t, env]:
                    break
                if batch["truncated"][t, env]:
                    total += weight * gamma * batch["final_values"][t, env].item()
                    break
                weight *= gamma
            else:
                total += weight * batch["bootstrap_value"][env].item()
            returns[s, env] = total
    return returns


@pytest.mark.parametrize("seed", [5, 6])
def test_on_policy_targets_are_the_n_step_returns(seed):
    batch = random_batch(12, 4, seed)
    batch["target_log_probs"] = batch["behaviour_log_probs"].clone()
    vs, advantages = vtrace(**batch, gamma=GAMMA)
    returns = n_step_returns(batch, GAMMA)
    torch.testing.assert_close(vs, returns)
    # the policy gradient's advantage is the one-step lookahead on those returns
    next_vs = torch.cat((vs[1:], batch["bootstrap_value"].unsqueeze(0)))
    ended = batch["terminated"] | batch["truncated"]
    cut = batch["truncated"] & ~batch["terminated"]
    one_step = batch["rewards"] + GAMMA * torch.where(cut, batch["final_values"], torch.where(ended, 0.0, next_vs))
    torch.testing.assert_close(advantages, one_step - batch["values"])


def test_ratios_above_the_clip_count_as_the_clip():
    """A ratio pi / mu of 5 with rho_bar = c_bar = 1 gives the on-policy targets; below the clip
    the ratio weighs the correction as it is."""
    batch = random_batch(10, 3, 7)
    batch["terminated"][:] = False
    batch["truncated"][:] = False
    on_policy = dict(batch, target_log_probs=batch["behaviour_log_probs"])
    far_off = dict(batch, target_log_probs=batch["behaviour_log_probs"] + math.log(5.0))
    for got, expected in zip(vtrace(**far_off, gamma=GAMMA), vtrace(**on_policy, gamma=GAMMA), strict=True):
        torch.testing.assert_close(got, expected)
    half = dict(batch, target_log_probs=batch["behaviour_log_probs"] + math.log(0.5))
    vs, advantages = vtrace(**half, gamma=GAMMA)
    expected_vs, expected_advantages = reference(half, GAMMA, 1.0, 1.0)
    torch.testing.assert_close(vs, expected_vs)
    _, on_policy_advantages = vtrace(**on_policy, gamma=GAMMA)
    assert not torch.allclose(advantages, on_policy_advantages)  # the half ratio changed them


def test_a_larger_rho_bar_lets_large_ratios_through():
    batch = random_batch(8, 3, 8, ratio_spread=2.0)
    clipped, _ = vtrace(**batch, gamma=GAMMA, rho_bar=1.0, c_bar=1.0)
    loose, _ = vtrace(**batch, gamma=GAMMA, rho_bar=100.0, c_bar=1.0)
    assert (batch["target_log_probs"] - batch["behaviour_log_probs"]).exp().max() > 5
    assert not torch.allclose(clipped, loose)
    torch.testing.assert_close(loose, reference(batch, GAMMA, 100.0, 1.0)[0])


def test_float32_batch_of_many_envs_keeps_its_dtype_and_agrees():
    batch = random_batch(32, 256, 9)
    single = {name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in batch.items()}
    vs, advantages = vtrace(**single, gamma=0.99)
    assert vs.dtype == advantages.dtype == torch.float32 and vs.shape == (32, 256)
    expected_vs, _ = vtrace(**batch, gamma=0.99)
    torch.testing.assert_close(vs.double(), expected_vs, rtol=1e-4, atol=1e-4)
    random.seed(0)  # a few columns against plain Python
    columns = random.sample(range(256), 3)
    few = {name: tensor[..., columns] if tensor.ndim == 2 else tensor[columns] for name, tensor in batch.items()}
    torch.testing.assert_close(vs[:, columns].double(), reference(few, 0.99, 1.0, 1.0)[0], rtol=1e-4, atol=1e-4)
