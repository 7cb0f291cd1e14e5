"""The training loop: collect a rollout -> advantages -> PPO update -> events -> checkpoint / GIF,
until `total_timesteps` or a stop signal.

    from trainer.config import load_config
    from trainer.loop import train
    result = train(load_config("configs/cartpole.yaml"), "runs/my-run")
    result.final_model        # runs/my-run/cartpole_ppo_final.pth

`train` owns the run directory's files (config.yaml, metrics.jsonl, train.log, checkpoints,
GIFs, the final model); `sinks` add more listeners (the studio's queue, the console, a progress
bar). Any exception becomes an `error` event followed by `end` (status `failed`) and is raised
again; a stop signal ends the run cleanly with a checkpoint and the final model.
"""
from __future__ import annotations

import dataclasses
import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from trainer.checkpoint import (FORMAT, FORMAT_VERSION, atomic_save, capture_env_state, checkpoint_path,
                                latest_checkpoint, library_versions, list_checkpoints, prune_checkpoints,
                                restore_env_state)
from trainer.config import TrainConfig, config_from_dict
from trainer.distributed import DistributedContext, setup_distributed
from trainer.events import EventBus, EventSink, JsonlSink, LogSink, TensorBoardSink, trim_events_after
from trainer.models import ActorCritic, build_policy, make_policy_spec
from trainer.normalization import RewardScaler
from trainer.ppo import Adam, UpdateSettings, compute_gae, ppo_update
from trainer.rollout import RolloutBuffer, collect_rollout, score_rollout
from trainer.run_dir import checkpoint_folder, final_model_path, write_config


GIF_SECONDS_PER_FRAME_ESTIMATE = 0.005


class ResumeError(RuntimeError):
    """A run cannot be resumed (no checkpoint, or one that does not fit the config)."""


@dataclass
class TrainResult:
    status: str                  # finished / stopped
    step: int                    # environment steps done (all ranks)
    run_dir: Path
    final_model: Path | None     # None on ranks other than 0
    last_metrics: dict | None    # the last metrics event
    policy: ActorCritic          # the trained network (on the training device)


def train(config: TrainConfig | dict, run_dir: str | Path, sinks: list[EventSink] | None = None,
          should_stop: Callable[[], bool] | None = None, resume: bool = False) -> TrainResult:
    """Train a policy as `config` says, writing everything into `run_dir`.

    sinks: extra event listeners (callables taking an event dict).
    should_stop: polled between updates; when it returns True the run saves a checkpoint and
        the final model and ends with status `stopped`.
    resume: continue from the newest checkpoint in the run directory.
    """
    if not isinstance(config, TrainConfig):
        config = config_from_dict(config)
    run_dir = Path(run_dir).resolve()
    context = setup_distributed(config.backend, _device_type(config))
    is_main = context is None or context.is_main
    bus = EventBus()
    if is_main:
        if not resume and _holds_a_run(run_dir, config):
            raise ResumeError(f"{run_dir} already holds a run (metrics.jsonl / checkpoints); resume it "
                              f"(--resume {run_dir}) or train into a new run directory")
        run_dir.mkdir(parents=True, exist_ok=True)
        bus.sinks = [JsonlSink(run_dir / "metrics.jsonl"),
                     LogSink(run_dir / "train.log", log_interval=config.log_interval)]
        bus.sinks += list(sinks or [])
    session: TrainingSession | None = None
    try:
        if is_main and config.tensorboard:
            _attach_tensorboard(bus, run_dir)
        session = TrainingSession(config, run_dir, bus, context)
        if resume:
            session.restore()
        return session.run(should_stop or (lambda: False))
    except BaseException as error:
        interrupted = isinstance(error, KeyboardInterrupt)
        if not interrupted:
            bus.emit("error", message=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        bus.emit("end", status="stopped" if interrupted else "failed",
                 step=session.global_step if session else 0, final_model=None)
        raise
    finally:
        if session is not None:
            session.close()
        bus.close()


def _holds_a_run(run_dir: Path, config: TrainConfig) -> bool:
    metrics = run_dir / "metrics.jsonl"
    return (metrics.is_file() and metrics.stat().st_size > 0) or bool(
        list_checkpoints(checkpoint_folder(run_dir, config)))


def _device_type(config: TrainConfig) -> str:
    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.device.split(":")[0]


def _attach_tensorboard(bus: EventBus, run_dir: Path) -> None:
    try:
        bus.sinks.append(TensorBoardSink(run_dir / "tensorboard"))
    except ImportError:
        bus.log("tensorboard: true, but the tensorboard package is not installed "
                "(pip install tensorboard); continuing without TensorBoard logs", level="warning")


def pick_device(config: TrainConfig, context: DistributedContext | None) -> torch.device:
    """`auto` -> CUDA when available; under torchrun, local rank i gets gpu_ids[i] (or GPU i)."""
    device_type = _device_type(config)
    if device_type != "cuda":
        return torch.device(device_type)
    if context is not None:
        ids = config.gpu_ids or list(range(torch.cuda.device_count()))
        index = ids[context.local_rank % len(ids)]
    elif ":" in config.device:
        index = int(config.device.split(":")[1])
    else:
        index = (config.gpu_ids or [0])[0]
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def make_training_env(config: TrainConfig, num_envs: int, device: torch.device | str, seed: int,
                      log: Callable[[str], None] | None = None):
    """The env the config names. Built-in games are batched tensor envs: they need no
    vector_env / num_workers, which then only earn a log line."""
    from envs import builtin_env_names, make_vec_env, resolve_env_name

    vector_env, num_workers = config.vector_env, config.num_workers
    canonical = resolve_env_name(config.env_name)
    if canonical in builtin_env_names() and not config.wrappers and (vector_env or num_workers):
        if log is not None:
            log(f"{config.env_name} runs as one batched tensor env ({num_envs} games in a few tensor ops per "
                f"step), so it needs no vector_env / worker processes: vector_env={vector_env!r}, "
                f"num_workers={num_workers!r} are ignored (they apply to Gymnasium envs; use "
                f"env_name: gym:{config.env_name} to force Gymnasium's vector env)")
        vector_env = num_workers = None
    return make_vec_env(config.env_name, num_envs, device=device, seed=seed, vector_env=vector_env,
                        num_workers=num_workers, wrappers=config.wrappers or None, **config.env_kwargs)


class TrainingSession:
    """Everything one training run holds: env, policy, optimiser, rollout storage, counters."""

    def __init__(self, config: TrainConfig, run_dir: Path, bus: EventBus, context: DistributedContext | None):
        self.config = config
        self.run_dir = run_dir
        self.bus = bus
        self.context = context
        self.is_main = context is None or context.is_main
        self.rank = context.rank if context else 0
        self.world_size = context.world_size if context else 1
        self.device = pick_device(config, context)
        self.env = None
        self.gif_recorder = None
        self._set_threads()

        torch.manual_seed(config.seed)  # network initialisation: the same on every rank
        self._pending_logs: list[str] = []    # said before the start event; emitted right after it
        self.env = make_training_env(config, config.num_envs, self.device, config.seed + self.rank,
                                     log=self._pending_logs.append)
        self.policy_spec = make_policy_spec(config.model_type, self.env.single_observation_space,
                                            self.env.single_action_space, config.norm_obs)
        self.policy = build_policy(self.policy_spec).to(self.device)
        if context is not None:
            context.broadcast_module_(self.policy)
        self.optimizer = Adam(self.policy)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed * 1_000_003 + 7919 * self.rank + 1)
        self.reward_scaler = RewardScaler(config.num_envs, config.gamma, self.device) if config.norm_reward else None
        obs_shape = tuple(self.policy_spec["obs_shape"])
        self.buffer = RolloutBuffer.allocate(config.num_steps, config.num_envs, obs_shape, self.policy, self.device)
        self.steps_per_update = config.batch_size * self.world_size
        self.num_updates = math.ceil(config.total_timesteps / self.steps_per_update)
        self.base_learning_rate = config.learning_rate * self._learning_rate_factor()
        self.settings = UpdateSettings(
            update_epochs=config.update_epochs, mini_batch_size=config.mini_batch_size,
            clip_coef=config.clip_coef, clip_vloss=config.clip_vloss, norm_adv=config.norm_adv,
            ent_coef=config.ent_coef, vf_coef=config.vf_coef, max_grad_norm=config.max_grad_norm,
            target_kl=config.target_kl, unclipped=config.algo == "a2c", use_per=config.use_per,
            per_alpha=config.per_alpha, per_beta=config.per_beta)

        self.global_step = 0
        self.update = 0
        self.episodes = 0
        self.elapsed_before = 0.0       # training seconds of earlier sessions (resumed runs)
        self.resumed_from_step: int | None = None
        self.last_metrics: dict | None = None
        self.gif_seconds = 0.0
        self.gif_seconds_per_frame = GIF_SECONDS_PER_FRAME_ESTIMATE  # replaced by the measured cost
        self.next_obs = self.env.reset(seed=config.seed + self.rank)
        if self.policy.obs_normalizer is not None:  # start from the statistics of the first observations
            self.policy.obs_normalizer.accumulate(self.next_obs)
            self.policy.obs_normalizer.commit(self._reduce_sum)
        if self.is_main and config.gif_interval:
            from trainer.gif import GifRecorder

            self.gif_recorder = GifRecorder(self._make_gif_env, self.policy_spec, config.gif_max_frames)

    # -- setup helpers ---------------------------------------------------------------------------

    def _set_threads(self) -> None:
        threads = self.config.torch_threads
        if threads == 0 and self.device.type == "cpu":
            # Small MLPs are launch-bound: one thread is as fast as two and leaves a core free.
            threads = 1 if self.config.model_type != "ppo-cnn" or self.world_size > 1 else 0
        if threads:
            torch.set_num_threads(threads)

    def _learning_rate_factor(self) -> float:
        rule = self.config.lr_scaling
        ratio = self.config.mini_batch_size * self.world_size / self.config.lr_reference_batch
        factor = {"none": 1.0, "sqrt": math.sqrt(ratio), "linear": ratio}[rule]
        if rule != "none":
            self._pending_logs.append(f"lr_scaling {rule}: {self.config.mini_batch_size * self.world_size} samples per gradient "
                         f"step vs reference {self.config.lr_reference_batch} -> learning rate "
                         f"{self.config.learning_rate:g} x {factor:.3g} = {self.config.learning_rate * factor:.3g}")
        return factor

    def _make_gif_env(self):
        # One env in this process, whatever the training env's vectorisation.
        single = dataclasses.replace(self.config, vector_env=None, num_workers=None)
        return make_training_env(single, 1, "cpu", self.config.seed + 1_000_003)

    def _reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.context is not None:
            self.context.all_reduce_sum_(tensor)

    def _reduce_gradients(self):
        if self.context is None:
            return None
        return self.context.all_reduce_mean_

    def learning_rate(self) -> float:
        """For the update about to run (self.update is 1-based): linear decay to 0 when anneal_lr."""
        if not self.config.anneal_lr:
            return self.base_learning_rate
        return self.base_learning_rate * (1.0 - (self.update - 1) / self.num_updates)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> TrainResult:
        config = self.config
        if self.is_main:
            write_config(self.run_dir, config)
            self.bus.emit("start", run_id=self.run_dir.name, config=config.to_dict(), device=str(self.device),
                          total_timesteps=self.num_updates * self.steps_per_update,
                          resumed_from_step=self.resumed_from_step, world_size=self.world_size,
                          num_updates=self.num_updates)
            for message in self._pending_logs:
                self.bus.log(message)
        self.session_started = time.perf_counter()
        self.session_start_step = self.global_step
        status = "finished"
        last_checkpoint_update = self.update if self.resumed_from_step is not None else -1
        while self.update < self.num_updates:
            if self._stop_requested(should_stop):
                status = "stopped"
                self.bus.log(f"stop requested: saving at step {self.global_step}")
                break
            self.update += 1
            statistics = self._train_one_update()
            self.global_step += self.steps_per_update
            self._emit_metrics(statistics)
            if self.is_main and config.checkpoint.interval and self.update % config.checkpoint.interval == 0:
                self.save_checkpoint()
                last_checkpoint_update = self.update
            if self._gif_due():
                self.record_gif()
        final_model = None
        if self.is_main:
            if last_checkpoint_update != self.update:
                self.save_checkpoint()
            final_model = self.save_final_model()
            if self.gif_recorder is not None and self.update > 0 and status == "finished":
                self.record_gif()
            self.bus.emit("end", status=status, step=self.global_step, final_model=str(final_model))
        return TrainResult(status, self.global_step, self.run_dir, final_model, self.last_metrics, self.policy)

    def _stop_requested(self, should_stop: Callable[[], bool]) -> bool:
        requested = bool(should_stop()) if self.is_main else False
        if self.context is not None:
            requested = self.context.any_rank(requested, self.device)
        return requested

    def _train_one_update(self) -> dict:
        config, buffer, policy = self.config, self.buffer, self.policy
        learning_rate = self.learning_rate()
        self.next_obs = collect_rollout(self.env, policy, buffer, self.next_obs, self.generator, self.reward_scaler)
        score_rollout(policy, buffer, config.gamma)
        with torch.no_grad():
            normalizer = policy.obs_normalizer
            next_input = self.next_obs if normalizer is None else normalizer.normalize(self.next_obs)
            last_value = policy.value(next_input)
        advantages, returns = compute_gae(buffer.rewards, buffer.values, buffer.dones, last_value,
                                          config.gamma, config.gae_lambda)
        if policy.obs_normalizer is not None:
            policy.obs_normalizer.commit(self._reduce_sum)
        if self.reward_scaler is not None:
            self.reward_scaler.return_stats.commit(self._reduce_sum)
        statistics = ppo_update(policy, self.optimizer, buffer.flatten(advantages, returns), self.settings,
                                learning_rate, self.generator, self._reduce_gradients())
        statistics["learning_rate"] = learning_rate
        return statistics

    def _emit_metrics(self, statistics: dict) -> None:
        summary = self.env.stats.drain()
        numbers = [summary.count,
                   (summary.return_mean or 0.0) * summary.count,
                   (summary.length_mean or 0.0) * summary.count,
                   (summary.score_mean or 0.0) * summary.count]
        recent = [summary.recent_return_mean, summary.recent_length_mean, summary.recent_score_mean]
        if self.context is not None:
            numbers, recent = self._merge_episode_numbers(numbers, recent)
        count = int(round(numbers[0]))
        self.episodes += count
        now = time.perf_counter()
        session_seconds = now - self.session_started
        steps_this_session = self.global_step - self.session_start_step

        def mean(total: float) -> float | None:
            return total / count if count else None

        fields = dict(
            step=self.global_step, update=self.update,
            fps=steps_this_session / max(session_seconds, 1e-9),
            elapsed=self.elapsed_before + session_seconds,
            episodes=self.episodes,
            episode_return_mean=mean(numbers[1]), episode_length_mean=mean(numbers[2]),
            episode_score_mean=mean(numbers[3]),
            recent_return_mean=recent[0], recent_length_mean=recent[1], recent_score_mean=recent[2],
            episode_return_max=summary.return_max, episode_score_max=summary.score_max,
            episodes_this_update=count, total_timesteps=self.num_updates * self.steps_per_update,
            final_update=self.update == self.num_updates,
            **statistics)
        if self.is_main:
            self.last_metrics = self.bus.emit("metrics", **fields)

    def _merge_episode_numbers(self, numbers: list[float], recent: list[float | None]):
        """Sum the episode totals of all ranks; average their recent-100 means."""
        packed = torch.tensor(numbers + [value if value is not None else 0.0 for value in recent]
                              + [1.0 if recent[0] is not None else 0.0], dtype=torch.float64, device=self.device)
        self._reduce_sum(packed)
        host = packed.tolist()
        ranks_with_recent = host[-1]
        merged_recent = [value / ranks_with_recent if ranks_with_recent else None for value in host[4:7]]
        return host[:4], merged_recent

    # -- GIFs -------------------------------------------------------------------------------------

    def _gif_due(self) -> bool:
        if self.gif_recorder is None or self.update % self.config.gif_interval:
            return False
        if self.config.gif_time_fraction >= 1.0:  # no budget
            return True
        training_seconds = self.elapsed_before + time.perf_counter() - self.session_started
        # Keep GIFs to gif_time_fraction of the run: skip this one if it would go over. Its cost is
        # guessed from the current episode length and the measured cost per frame.
        episode_length = (self.last_metrics or {}).get("recent_length_mean") or self.config.gif_max_frames
        expected_cost = self.gif_seconds_per_frame * min(self.config.gif_max_frames, episode_length)
        return self.gif_seconds + expected_cost <= self.config.gif_time_fraction * training_seconds

    def record_gif(self) -> None:
        path = self.run_dir / "rollouts" / f"step_{self.global_step}.gif"
        try:
            result = self.gif_recorder.record(self.policy.state_dict(), path,
                                              seed=self.config.seed + 1_000_003 + self.update)
        except Exception as error:  # noqa: BLE001 - a GIF must never end a training run
            self.bus.log(f"rollout GIFs turned off: recording one failed with {type(error).__name__}: {error}",
                         level="warning")
            self.gif_recorder.close()
            self.gif_recorder = None
            return
        self.gif_seconds += result.seconds
        self.gif_seconds_per_frame = result.seconds / max(1, result.frames)
        self.bus.emit("gif", step=self.global_step, path=str(result.path), episode_return=result.episode_return,
                      episode_score=result.episode_score, frames=result.frames, seconds=result.seconds)

    # -- saving and resuming ----------------------------------------------------------------------

    def _base_payload(self, kind: str) -> dict:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind,
            "policy_spec": self.policy_spec, "policy_state": self.policy.state_dict(),
            "config": self.config.to_dict(), "env_name": self.config.env_name, "algo": self.config.algo,
            "global_step": self.global_step, "update": self.update,
            "elapsed": self.elapsed_before + time.perf_counter() - self.session_started,
            "episodes": self.episodes, "versions": library_versions(),
        }

    def save_checkpoint(self) -> Path:
        payload = self._base_payload("checkpoint")
        payload.update({
            "optimizer_state": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler is not None else None,
            "rng": {"sampling": self.generator.get_state()},
            "env_state": capture_env_state(self.env),
            "next_obs": self.next_obs,
            "num_envs": self.config.num_envs, "world_size": self.world_size,
            "gif_seconds": self.gif_seconds,
        })
        folder = checkpoint_folder(self.run_dir, self.config)
        path = atomic_save(payload, checkpoint_path(folder, self.global_step))
        prune_checkpoints(folder, self.config.checkpoint.keep)
        self.bus.emit("checkpoint", step=self.global_step, path=str(path))
        return path

    def save_final_model(self) -> Path:
        path = atomic_save(self._base_payload("model"), final_model_path(self.run_dir, self.config))
        self.bus.emit("model", step=self.global_step, path=str(path))
        return path

    def restore(self) -> None:
        """Continue from the newest loadable checkpoint of this run."""
        folder = checkpoint_folder(self.run_dir, self.config)
        found = latest_checkpoint(folder, map_location=self.device)
        if found is None:
            raise ResumeError(f"nothing to resume: no loadable checkpoint in {folder}. Start a new run instead, "
                              f"or point --resume at a run directory that has checkpoints/ckpt_<step>.pth")
        path, payload = found
        saved_spec = payload["policy_spec"]
        if saved_spec != self.policy_spec:
            raise ResumeError(f"{path} holds a {saved_spec['model_type']} network for observations "
                              f"{saved_spec['obs_shape']} / actions {saved_spec['action']}, but this config builds "
                              f"{self.policy_spec['model_type']} for {self.policy_spec['obs_shape']} / "
                              f"{self.policy_spec['action']}; resume with the run's own config.yaml")
        self.policy.load_state_dict(payload["policy_state"])
        self.optimizer.load_state_dict(payload["optimizer_state"])
        if self.reward_scaler is not None and payload.get("reward_scaler") is not None:
            self.reward_scaler.load_state_dict(payload["reward_scaler"])
        self.global_step = int(payload["global_step"])
        self.update = int(payload["update"])
        self.episodes = int(payload.get("episodes", 0))
        self.elapsed_before = float(payload.get("elapsed", 0.0))
        self.gif_seconds = float(payload.get("gif_seconds", 0.0))
        same_layout = payload.get("num_envs") == self.config.num_envs and payload.get("world_size") == self.world_size
        if payload.get("env_state") is not None and same_layout and self.rank == 0:
            self.generator.set_state(payload["rng"]["sampling"])
            restore_env_state(self.env, payload["env_state"])
            self.next_obs = payload["next_obs"].to(self.device)
        else:
            # Gymnasium envs, other ranks, or a changed num_envs: fresh episodes, new random streams.
            seed = self.config.seed + self.rank + 7919 * self.update
            self.generator.manual_seed(seed * 1_000_003 + 1)
            self.next_obs = self.env.reset(seed=seed)
        self.resumed_from_step = self.global_step
        if self.is_main:
            dropped = trim_events_after(self.run_dir / "metrics.jsonl", self.global_step)
            self._pending_logs.append(f"resumed from {path} at step {self.global_step}" + (
                f" ({dropped} events after it dropped from metrics.jsonl)" if dropped else ""))

    def close(self) -> None:
        if self.gif_recorder is not None:
            self.gif_recorder.close()
        if self.env is not None:
            self.env.close()
