"""V-trace (Espeholt et al. 2018, IMPALA, section 4.1): value targets and policy-gradient
advantages for experience that a slightly older policy mu played, while the learner's policy pi
has moved on (the actors' policy lag).

With rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)) and c_t = min(c_bar, pi / mu), time-major:

    delta_t   = rho_t (r_t + g_t V(x_{t+1}) - V(x_t))
    v_t       = V(x_t) + delta_t + g_t c_t (v_{t+1} - V(x_{t+1}))          (v_T = V(x_T), the bootstrap)
    A_t       = rho_t (r_t + g_t v_{t+1} - V(x_t))                          (the policy gradient's)

g_t = gamma where the episode goes on after step t and 0 where it ended (terminated or truncated).
An episode cut by a time limit is bootstrapped as trainer/algos/rollout.py's `bootstrap_truncated`
does: r_t += gamma V(final observation), unless the game ended it in the same step. rho_bar bounds
the fixed point the values converge to (rho_bar = 1: V^pi); c_bar how far corrections travel back.
On-policy (pi = mu, rho_bar, c_bar >= 1), v_t is the n-step return bootstrapped at the batch's end.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def vtrace(
    behaviour_log_probs: Tensor,
    target_log_probs: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """(vs, pg_advantages), both (T, N), of a time-major batch of T steps of N envs.

    behaviour_log_probs, target_log_probs: log mu(a_t|x_t), log pi(a_t|x_t). values: V(x_t).
    bootstrap_value: (N,) V(x_T), of the observations after the last step. terminated / truncated:
    bool, the episode ended with step t. final_values: V(final observation), read where truncated
    and not terminated (anything elsewhere). One loop over T; every op covers all N envs."""
    ratios = (target_log_probs - behaviour_log_probs).exp()
    rhos = ratios.clamp(max=rho_bar)
    cs = ratios.clamp(max=c_bar)
    ended = terminated | truncated
    discounts = gamma * (~ended).to(values.dtype)
    cut = truncated & ~terminated  # a time limit, not the game: bootstrap from the final observation
    rewards = torch.where(cut, rewards + gamma * final_values, rewards)
    next_values = torch.cat((values[1:], bootstrap_value.unsqueeze(0)))
    deltas = rhos * (rewards + discounts * next_values - values)
    decays = discounts * cs
    corrections = torch.empty_like(values)  # v_t - V(x_t)
    running = torch.zeros_like(bootstrap_value)
    for t in range(values.shape[0] - 1, -1, -1):
        running = torch.addcmul(deltas[t], decays[t], running, out=corrections[t])
    vs = values + corrections
    next_vs = torch.cat((vs[1:], bootstrap_value.unsqueeze(0)))
    pg_advantages = rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages
