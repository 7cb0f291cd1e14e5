"""The peer for the off-policy section: Stable-Baselines3's DQN and SAC with our config's settings.

`sb3_off_policy` runs in a fresh process (see `benchmarks.contender`). It takes the settings of
one of our configs as plain values (`benchmarks.off_policy.shared_settings` reads them) and
gives them to SB3 under its own names, so both sides run the same hyperparameters:

    ours                      SB3                        ours                  SB3
    num_envs                  n_envs (DummyVecEnv)       mini_batch_size       batch_size
    num_steps (train_freq)    train_freq (steps per env) gradient_steps        gradient_steps
    buffer_size               buffer_size                learning_starts       learning_starts
    learning_rate, anneal_lr  learning_rate (linear)     gamma, tau, n_step    gamma, tau, n_steps
    target_update_interval    target_update_interval     exploration_*         exploration_*
    autotune, alpha           ent_coef "auto_<alpha>"    target_entropy null   target_entropy "auto"
    hidden_sizes / model_type net_arch (ReLU both)       norm_obs / norm_reward VecNormalize

It trains until the mean return of the last 100 finished episodes reaches `target` (the rule of
the CartPole solve section), `cap_seconds` of training pass, or `total_steps` are done; then, if
asked (`eval_episodes`), SB3's `evaluate_policy` plays the model deterministically on a fresh env
seeded apart from training. SB3 runs on the CPU, its own advice for MLP policies.
"""

from __future__ import annotations

import time
from typing import Any


def _learning_rate(settings: dict[str, Any]):
    rate = float(settings["learning_rate"])
    if not settings.get("anneal_lr"):
        return rate
    return lambda progress_remaining: progress_remaining * rate  # ours: linear to 0 over the run


def sb3_kwargs(algo: str, settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """The keyword arguments of SB3's DQN / SAC that say what `settings` (our keys) say."""
    common = {
        "learning_rate": _learning_rate(settings),
        "buffer_size": int(settings["buffer_size"]),
        "learning_starts": int(settings["learning_starts"]),
        "batch_size": int(settings["mini_batch_size"]),
        "tau": float(settings["tau"]),
        "gamma": float(settings["gamma"]),
        "train_freq": int(settings["num_steps"]),
        "gradient_steps": int(settings["gradient_steps"]),
        "n_steps": int(settings.get("n_step", 1)),
        "policy_kwargs": {"net_arch": list(settings["hidden_sizes"])},
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
    }
    if algo == "dqn":
        return {
            **common,
            "target_update_interval": int(settings["target_update_interval"]),
            "exploration_fraction": float(settings["exploration_fraction"]),
            "exploration_initial_eps": float(settings["exploration_initial_eps"]),
            "exploration_final_eps": float(settings["exploration_final_eps"]),
        }
    if algo == "sac":
        alpha = float(settings["alpha"])
        target_entropy = settings.get("target_entropy")
        return {
            **common,
            "ent_coef": f"auto_{alpha}" if settings.get("autotune", True) else alpha,
            "target_entropy": "auto" if target_entropy is None else float(target_entropy),
        }
    raise ValueError(f"the off-policy peer runs algo dqn or sac, got {algo!r}")


def _make_env(env_id: str, settings: dict[str, Any], seed: int):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(env_id, n_envs=int(settings["num_envs"]), seed=seed)  # DummyVecEnv + Monitor
    if settings.get("norm_obs") or settings.get("norm_reward"):  # Monitor sits below: returns stay raw
        env = VecNormalize(
            env,
            norm_obs=bool(settings.get("norm_obs")),
            norm_reward=bool(settings.get("norm_reward")),
            gamma=float(settings["gamma"]),
        )
    return env


def _watcher(target: float | None, cap_seconds: float | None, train_start: list[float]):
    """An SB3 callback: the mean-100 return over wall time; stops at `target` or after the cap."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class Watcher(BaseCallback):
        def __init__(self):
            super().__init__()
            self.series: list[tuple[float, int, float]] = []  # (train seconds, step, mean-100 return)
            self.best: float | None = None
            self.reached: tuple[float, float, int] | None = None  # (train seconds, unix time, step)
            self.capped = False

        def _on_step(self) -> bool:
            seconds = time.perf_counter() - train_start[0]
            if cap_seconds is not None and seconds > cap_seconds:
                self.capped = True
                return False
            finished = [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            if not finished:
                return True
            # SB3 adds this step's episodes to its last-100 buffer after the callback: add them here.
            returns = [info["r"] for info in self.model.ep_info_buffer] + finished
            recent = float(np.mean(returns[-100:]))
            self.best = recent if self.best is None else max(self.best, recent)
            self.series.append((seconds, int(self.num_timesteps), recent))
            if target is not None and recent >= target:
                self.reached = (seconds, time.time(), int(self.num_timesteps))
                return False
            return True

    return Watcher()


def _evaluate(model, env, env_id: str, episodes: int, seed: int) -> list[float]:
    """SB3's evaluate_policy: `episodes` deterministic episodes on a fresh `env_id` env seeded
    `seed` (observations normalised with the training statistics where training normalised them)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    eval_env = make_vec_env(env_id, n_envs=1, seed=seed)  # Monitor inside: raw returns
    if isinstance(env, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_obs=env.norm_obs, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
    try:
        returns, _ = evaluate_policy(
            model, eval_env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True
        )
    finally:
        eval_env.close()
    return [float(value) for value in returns]


def evaluation_summary(returns: list[float], seed: int) -> dict[str, Any]:
    """A deterministic evaluation's figures, the same on both sides."""
    return {
        "episodes": len(returns),
        "seed": seed,
        "return_mean": sum(returns) / len(returns),
        "return_min": min(returns),
        "returns": list(returns),
    }


def thinned(series: list, most: int = 400) -> list:
    """At most `most` points of a long series, evenly spaced, the last one kept (for the JSON)."""
    if len(series) <= most:
        return list(series)
    stride = len(series) / most
    return [series[int(index * stride)] for index in range(most - 1)] + [series[-1]]


def sb3_off_policy(
    algo: str,
    env_id: str,
    settings: dict[str, Any],
    total_steps: int,
    target: float | None = None,
    cap_seconds: float | None = None,
    seed: int = 0,
    eval_episodes: int = 0,
    eval_seed: int = 0,
) -> dict[str, Any]:
    """SB3's `algo` on `env_id` with our `settings` until `target`, the cap or `total_steps`; then,
    if `eval_episodes`, that many deterministic episodes on env seed `eval_seed` ("evaluation").

    `total_steps` is the run's length as the schedules see it (epsilon, annealed learning rate):
    pass our config's `total_timesteps`, so that both sides decay over the same run."""
    from stable_baselines3 import DQN, SAC

    env = _make_env(env_id, settings, seed)
    model = {"dqn": DQN, "sac": SAC}[algo]("MlpPolicy", env, **sb3_kwargs(algo, settings, seed))
    train_start = [0.0]
    watcher = _watcher(target, cap_seconds, train_start)
    train_start[0] = time.perf_counter()
    model.learn(total_timesteps=int(total_steps), callback=watcher)
    seconds = time.perf_counter() - train_start[0]
    steps = int(model.num_timesteps)
    evaluation = {}
    if eval_episodes:
        evaluation["evaluation"] = evaluation_summary(
            _evaluate(model, env, env_id, eval_episodes, eval_seed), eval_seed
        )
    env.close()
    reached = watcher.reached
    return {
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds if seconds > 0 else None,
        "target": target,
        "solved": reached is not None,
        "solve_train_seconds": reached[0] if reached else None,
        "solve_unix_time": reached[1] if reached else None,
        "solve_step": reached[2] if reached else None,
        "capped": watcher.capped,
        "best_return_mean": watcher.best,
        "final_return_mean": watcher.series[-1][2] if watcher.series else None,
        "series": thinned(watcher.series),
        **evaluation,
    }
