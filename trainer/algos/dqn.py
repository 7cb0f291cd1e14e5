"""DQN (Mnih et al. 2015) as CleanRL writes it, on batched envs, read top to bottom:

1. `collect`: `num_steps` steps of every env, epsilon-greedy on the Q-network (epsilon falls
   linearly from `exploration_initial_eps` to `exploration_final_eps` over the first
   `exploration_fraction` of the run), each step of all envs written to the replay buffer at once
   (trainer/algos/replay.py). An env that masks actions (`action_masks()`) has both the greedy
   and the random action chosen among its allowed ones.
   In an Ape-X run (`setup.experience`, trainer/algos/replay_feed.py) actors play instead and
   `collect` writes their newest batch into the buffer (with their initial priorities under PER).
2. `update`: once `learning_starts` steps are stored, `gradient_steps` steps, each on a minibatch
   of `mini_batch_size` replayed transitions:
       target = returns + discounts * Q_target(s', argmax_a Q(s', a))   (double Q: the online
                network picks the action, the target network scores it; plain: max_a Q_target;
                a over the actions allowed at s' where the env masks them)
       loss   = mean(weights * (Q(s, a) - target)^2)                      (weights: PER, else 1)
   then the target network follows: a copy every `target_update_interval` env steps (`tau` 1),
   or Polyak averaging after each gradient step (`tau` < 1). With `use_per` the sampled items'
   priorities become their TD errors, and `per_beta` rises linearly to 1 over the run. Actors
   get the new weights every `weights_every` updates.

The playing network is `QNetwork` (trainer/nets/q_network.py: MLP or convolutional torso, optional
dueling heads); it plays greedily after training (evaluate, GIFs, ONNX, the policy server).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algos.adam import Adam, flat_parameters
from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.dqn_fast import next_value, q_layers, q_loss_and_gradient
from trainer.algos.dqn_settings import DQN_LEARNED_METRICS, DQN_METRICS, DQN_SUMMARY, DQNKeys, check_dqn, epsilon_at
from trainer.algos.replay import ReplayBuffer, one_process_only, per_beta_at, replay_state, restore_replay
from trainer.algos.replay_feed import ReplayFeed, shared_nets
from trainer.algos.target_network import frozen_copy
from trainer.nets.masks import ActionMaskError, masked_argmax, random_allowed
from trainer.nets.q_network import QNetwork


class DQN(Algorithm):
    summary = DQN_SUMMARY
    keys = DQNKeys
    metric_names = DQN_METRICS
    replay = True
    actions = "discrete"
    check_config = staticmethod(check_dqn)

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config, device = setup.config, setup.device
        one_process_only(setup)
        spec = {**setup.policy_spec, "network": "q", "dueling": config.dueling}
        self.policy = QNetwork(spec).to(device)
        self.target = frozen_copy(self.policy)
        self.optimizer = Adam(self.policy)  # trainer/algos/adam.py: one flat vector, one step
        self.target_flat = flat_parameters(self.target)  # copies and Polyak: one operation each
        # An MLP Q-network gets its gradient written out (trainer/algos/dqn_fast.py); None: autograd.
        self.layers = q_layers(self.policy)
        self.buffer = ReplayBuffer.for_config(config, self.policy, device)
        self.steps_per_update = config.num_envs * config.num_steps
        self.last_target_copy = 0  # env steps (this process) at the last hard copy
        self.epsilon = config.exploration_initial_eps
        # Ape-X (setup.experience): what the actors get, the Q-network (and its target for priorities)
        self.feed = ReplayFeed(setup, shared_nets(config, policy=self.policy, target=self.target))

    # -- 1. acting ------------------------------------------------------------------------------

    def epsilon_at(self, step: int) -> float:
        return epsilon_at(self.setup.config, step)

    @torch.no_grad()
    def collect(self, obs: Tensor, progress: Progress) -> Tensor:
        setup, num_envs = self.setup, self.setup.config.num_envs
        if setup.experience is not None:  # Ape-X: the actors played; their batch into the buffer
            self.epsilon = self.epsilon_at(progress.global_step)  # what the actors play with (about)
            self.feed.take(self.buffer, progress)
            return obs
        generator, device = setup.generator, setup.device
        masks = setup.env.action_masks()  # None: the env masks no action
        some_allowed = None if masks is None else torch.ones((), dtype=torch.bool, device=device)
        for t in range(setup.config.num_steps):
            self.epsilon = self.epsilon_at(progress.global_step + t * num_envs)
            q = self.policy(obs)
            if masks is None:
                greedy = q.argmax(-1)
                random = torch.randint(self.policy.action_size, (num_envs,), generator=generator, device=device)
            else:
                some_allowed &= masks.any(-1).all()
                greedy, random = masked_argmax(q, masks), random_allowed(masks, generator)
            explore = torch.rand(num_envs, generator=generator, device=device) < self.epsilon
            actions = torch.where(explore, random, greedy)
            next_obs, reward, terminated, truncated, info = setup.env.step(actions)
            masks = setup.env.action_masks()
            # After an episode end the mask is the new episode's: the final observation's is gone
            # (its target is not bootstrapped when terminated), so every action counts there.
            next_masks = None if masks is None else masks | (terminated | truncated).unsqueeze(-1)
            self.buffer.add(obs, actions, reward, info["final_obs"], terminated, truncated, next_masks)
            obs = next_obs
        if some_allowed is not None and not bool(some_allowed):  # one host sync per collect
            raise ActionMaskError(f"{setup.env.name}'s action_masks() allowed no action for some env")
        return obs

    # -- 2. learning ----------------------------------------------------------------------------

    def update(self, progress: Progress) -> dict:
        config = self.setup.config
        steps_done = progress.global_step + self.steps_per_update
        metrics = {"buffer_size": self.buffer.size, "epsilon": self.epsilon, "gradient_steps": 0}
        if steps_done < config.learning_starts or not self.buffer.can_sample(config.mini_batch_size):
            return {**metrics, **self.feed.learned(progress)}
        beta = per_beta_at(config, progress)
        if self.layers is not None:
            self.optimizer.check_parameters()  # the written gradient lands in the optimiser's vector
        totals = torch.zeros(3, device=self.setup.device)  # DQN_LEARNED_METRICS: loss, mean Q, mean |TD error|
        batches = self.buffer.batches(config.gradient_steps, config.mini_batch_size, self.setup.generator, beta)
        for batch in batches:
            with torch.no_grad():
                bootstrap = next_value(self.policy, self.target, batch.next_obs, batch.next_masks, config.double_q)
                target = batch.returns + batch.discounts * bootstrap
            if self.layers is not None:  # the same loss and gradient, without autograd
                loss, q, td_error = q_loss_and_gradient(self.layers, batch.obs, batch.actions, target, batch.weights)
            else:
                q = self.policy(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
                td_error = q - target
                loss = (batch.weights * td_error.square()).mean()
                self.optimizer.zero_grad()
                loss.backward()
            self.optimizer.step(progress.learning_rate)
            self.buffer.update_priorities(batch.indices, td_error)
            if config.tau < 1.0:  # Polyak: target <- tau online + (1 - tau) target
                self.target_flat.lerp_(self.optimizer.flat_param, config.tau)
            totals += torch.stack((loss.detach(), q.detach().mean(), td_error.detach().abs().mean()))
        if config.tau >= 1.0 and steps_done - self.last_target_copy >= config.target_update_interval:
            self.target_flat.copy_(self.optimizer.flat_param)
            self.last_target_copy = steps_done
        learned = dict(zip(DQN_LEARNED_METRICS, (totals / config.gradient_steps).tolist(), strict=True))
        return {**metrics, **learned, "gradient_steps": config.gradient_steps, **self.feed.learned(progress)}

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "last_target_copy": self.last_target_copy,
            "epsilon": self.epsilon,
            **replay_state(self.buffer, self.setup.config.save_buffer),
        }

    def load_state_dict(self, state: dict) -> None:
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.last_target_copy = int(state["last_target_copy"])
        self.epsilon = float(state["epsilon"])
        restore_replay(self.buffer, state, self.setup.log)
