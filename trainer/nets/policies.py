"""The policy / value networks (`ActorCritic`), built from a spec (trainer/nets/spec.py).

Discrete action spaces get a categorical head (logits); continuous ones a Gaussian head with a
state-independent log standard deviation. Weights use orthogonal initialisation as in the PPO
literature: gain sqrt(2) for hidden layers, 0.01 for the policy output (a near-uniform first
policy), 1 for the value output. The forward pass is the modules'; the no-grad forms derived
from them live in trainer/nets/fast_forward.py.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from trainer.nets.fast_forward import ActionSampler, RolloutScorer
from trainer.nets.masks import mask_logits, masked_sample
from trainer.nets.playing import PlayingNetwork
from trainer.nets.spec import CNN_FEATURES
from trainer.nets.torso import ConvTorso, hidden_sizes, layer, mlp, obs_size

LOG_2PI = math.log(2 * math.pi)


class PolicyDistribution(PlayingNetwork):
    """What every actor-critic's policy head shares (`ActorCritic`; `RecurrentActorCritic` in
    trainer/nets/recurrent.py): a categorical distribution over `logits` for discrete actions, a
    Gaussian around `head` with the state-independent `log_std` for continuous ones; sampling it,
    its log-probabilities and entropy."""

    def choose(
        self,
        head: Tensor,
        value: Tensor,
        generator: torch.Generator | None,
        deterministic: bool,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(action, log pi(action), value) from the actor's (masked) `head`: its most likely action,
        or a sample of the policy."""
        if deterministic:
            action = head.argmax(-1) if self.discrete else head
        else:
            noise = self.action_noise(1, head.shape[0], generator, head.device)[0]
            std = self.log_std.exp() if not self.discrete else None
            action = self.noisy_action(head.clone(), noise, std, action_mask)
        return action, self._log_prob(head, action), value

    def action_noise(
        self, steps: int, batch: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
    ) -> Tensor:
        """(steps, batch, head size) randomness for `steps` batches of actions: Gumbel noise for
        a categorical head, standard normal noise for a Gaussian one (see `noisy_action`)."""
        action = self.spec["action"]
        shape = (steps, batch, action["n"] if self.discrete else action["dim"])
        if self.discrete:  # Gumbel(0, 1) = -log(-log(U)), U uniform in [0, 1)
            return torch.rand(shape, generator=generator, device=device).log_().neg_().log_().neg_()
        return torch.randn(shape, generator=generator, device=device)

    def noisy_action(
        self, head: Tensor, noise: Tensor, std: Tensor | None, action_mask: Tensor | None = None
    ) -> Tensor:
        """A sample of the policy, computed in place on `head`: argmax(logits + Gumbel noise) is a
        sample of softmax(logits) (the Gumbel-max trick); mean + std * noise one of the Gaussian.
        With `action_mask`, the argmax runs over the allowed actions only."""
        if action_mask is not None:
            return masked_sample(head, noise, action_mask)
        if self.discrete:
            return head.add_(noise).argmax(-1)
        return head.addcmul_(noise, std)

    def _log_prob_and_entropy(self, head: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """(log pi(action), entropy of pi) of the distribution the actor's `head` describes."""
        if self.discrete:
            log_probs = head.log_softmax(-1)
            log_prob = log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            return log_prob, -(log_probs.exp() * log_probs).sum(-1)
        entropy = (0.5 + 0.5 * LOG_2PI + self.log_std).sum().expand(head.shape[0])
        return self._gaussian_log_prob(head, action), entropy

    def _log_prob(self, head: Tensor, action: Tensor, action_mask: Tensor | None = None) -> Tensor:
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        if self.discrete:
            return head.log_softmax(-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        return self._gaussian_log_prob(head, action)

    def _gaussian_log_prob(self, mean: Tensor, action: Tensor) -> Tensor:
        log_std = self.log_std
        return (-0.5 * ((action - mean) / log_std.exp()).square() - log_std - 0.5 * LOG_2PI).sum(-1)


class ActorCritic(PolicyDistribution):
    """pi(a|s) and V(s). The methods take *normalised* observations (see `normalize_obs`),
    because the trainer stores observations as the policy saw them during the rollout."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        model_type = spec["model_type"]
        action_outputs = self.action_size
        if model_type == "ppo-cnn":
            self.torso: nn.Module | None = ConvTorso(list(spec["obs_shape"]), spec.get("obs_scale", 1.0))
            self.actor = layer(CNN_FEATURES, action_outputs, 0.01)
            self.critic = layer(CNN_FEATURES, 1, 1.0)
        else:
            self.torso = None
            hidden = hidden_sizes(spec)
            self.actor = mlp(obs_size(spec), hidden, action_outputs, 0.01)
            self.critic = mlp(obs_size(spec), hidden, 1, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(action_outputs))

    @property
    def detail_names(self) -> tuple[str, ...]:
        return ("probs" if self.discrete else "mean", "value")

    def _features(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs of the actor and of the critic."""
        if self.torso is not None:
            shared = self.torso(obs)
            return shared, shared
        flat = obs.reshape(obs.shape[0], -1)
        return flat, flat

    def exported(
        self, obs: Tensor, with_details: bool = False, action_mask: Tensor | None = None
    ) -> tuple[Tensor, ...]:
        self.check_action_mask(action_mask, rows=False)
        actor_input, critic_input = self._features(obs)
        head = self.actor(actor_input)
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        action = head.argmax(-1) if self.discrete else self.env_action(head)
        if not with_details:
            return (action,)
        detail = head.softmax(-1) if self.discrete else head
        return action, detail, self.critic(critic_input).squeeze(-1)

    # -- pi and V ------------------------------------------------------------------------------

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(self._features(obs)[1]).squeeze(-1)

    def act(
        self,
        obs: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        action_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Sample actions: (action, log pi(action|obs), V(obs)); forbidden actions (`action_mask`
        False) have probability 0."""
        self.check_action_mask(action_mask)
        actor_input, critic_input = self._features(obs)
        head = self.actor(actor_input)
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        value = self.critic(critic_input).squeeze(-1)
        return self.choose(head, value, generator, deterministic, action_mask)

    def sampler(self) -> ActionSampler:
        """A fast no-grad actor for the rollout (a snapshot of the current weights)."""
        return ActionSampler(self)

    def scorer(self) -> RolloutScorer:
        """pi(a|s) and V(s) without gradients, from a snapshot of the current weights."""
        return RolloutScorer(self)

    def score(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(log pi(action|obs), V(obs)) without gradients: the rollout's pi_old and V_old."""
        return self.scorer()(obs, action, action_mask)

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """For the update: (log pi(action|obs), entropy of pi(.|obs), V(obs)), of the masked
        distribution when the rollout had `action_mask`."""
        actor_input, critic_input = self._features(obs)
        head = self.actor(actor_input)
        if action_mask is not None:
            head = mask_logits(head, action_mask)
        value = self.critic(critic_input).squeeze(-1)
        return (*self._log_prob_and_entropy(head, action), value)
