"""The training loop: collect -> update (the algorithm's, through trainer/algos/base.py) -> metrics ->
checkpoint / GIF, until `total_timesteps` or a stop signal.

    from trainer.config.defaults import load_config
    from trainer.run.loop import train
    result = train(load_config("configs/cartpole.yaml"), "runs/my-run")
    result.final_model        # runs/my-run/cartpole_ppo_final.pth

`train` owns the run directory's files (config.yaml, metrics.jsonl, train.log, checkpoints,
GIFs, the final model); `sinks` add more listeners (the studio's queue, the console, a progress
bar). Any exception becomes an `error` event followed by `end` (status `failed`) and is raised
again; a stop signal ends the run cleanly with a checkpoint and the final model.

What the loop is built from lives beside it: device, threads, learning-rate scaling and the env
in trainer/run/setup.py, every seed in trainer/run/seeding.py, the metrics event, checkpoints, the final model
and GIFs of each update in trainer/run/outputs.py, checkpoint payloads and resuming in trainer/run/resume.py,
the GIF schedule and budget in trainer/run/gif.py, merging across ranks in trainer/run/ranks.py.
The algorithm (`config.algo`, trainer/algos/registry.py) is called through its protocol only, so
every algorithm runs through this one loop, for the CLI, the API, the studio and every rank.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.experience import ExperienceClosed, ExperienceSource
from trainer.algos.registry import algorithm_class
from trainer.config.keys import TrainConfig
from trainer.config.validation import config_from_dict
from trainer.nets.policies import ActorCritic
from trainer.run.events import EventBus, EventSink
from trainer.run.gif import GifSchedule
from trainer.run.layout import write_config
from trainer.run.outputs import (
    checkpoint_due,
    emit_metrics,
    metric_blanks,
    record_gif,
    save_checkpoint,
    save_final_model,
)
from trainer.run.owner import RunOwner, take_ownership
from trainer.run.ranks import DistributedContext, setup_distributed
from trainer.run.resume import ResumeError, resume_session
from trainer.run.seeding import seeds
from trainer.run.setup import (
    EnvFactory,
    attach_tensorboard,
    config_env_factory,
    device_type,
    open_run_dir,
    pick_device,
    policy_spec,
    scaled_learning_rate,
    set_threads,
)
from trainer.run.storage import failure_message

__all__ = ["train", "TrainResult", "TrainingSession", "ResumeError", "open_run_dir", "report_failure"]


@dataclass
class TrainResult:
    status: str  # finished / stopped
    step: int  # environment steps done (all ranks)
    run_dir: Path | None  # None for an in-memory session (the Python API's run_dir=None)
    final_model: Path | None  # None on ranks other than 0, and in memory
    last_metrics: dict | None  # the last metrics event
    policy: ActorCritic  # the trained network (on the training device)


def train(
    config: TrainConfig | dict,
    run_dir: str | Path,
    sinks: list[EventSink] | None = None,
    should_stop: Callable[[], bool] | None = None,
    resume: bool = False,
    preflight: bool = True,
    experience: ExperienceSource | None = None,
) -> TrainResult:
    """Train a policy as `config` says, writing everything into `run_dir`.

    config: a TrainConfig or a dict of YAML keys; either is validated (a hand-built TrainConfig
        with a bad value fails here, naming the key, not deep inside the rollout).
    sinks: extra event listeners (callables taking an event dict).
    should_stop: polled between updates; when it returns True the run saves a checkpoint and
        the final model and ends with status `stopped`.
    resume: continue from the newest checkpoint in the run directory.
    preflight: first build the env once and check the run fits in memory
        (trainer.config.preflight.check_run_fits), before the run folder is touched; False for a caller
        that just did (the CLI). A ConfigError then leaves no folder and no file behind.
    experience: where the algorithm takes its batches from instead of its own env (an actor-learner
        run's hub, trainer/cluster/learner_hub.py); handed to it in `Setup.experience`.
    """
    config = config_from_dict(config)
    if preflight:
        from trainer.config.preflight import check_run_fits

        check_run_fits(config)
    run_dir = Path(run_dir).resolve()
    context = setup_distributed(config.backend, device_type(config))
    is_main = context is None or context.is_main
    bus = EventBus()
    session: TrainingSession | None = None
    owner: RunOwner | None = None  # one trainer per run folder (owner.json, trainer/run/owner.py)
    try:
        if is_main:
            owner = take_ownership(run_dir)  # RunOwnedError names the live owner; nothing is written then
            open_run_dir(bus, run_dir, config, resume)
            bus.sinks += list(sinks or [])
            if config.tensorboard:
                attach_tensorboard(bus, run_dir)
        session = TrainingSession(config, run_dir, bus, context, experience=experience)
        if resume:
            session.restore()
        return session.run(should_stop or (lambda: False))
    except BaseException as error:
        report_failure(bus, error, session, run_dir)
        raise
    finally:
        if session is not None:
            session.close()
        bus.close()
        if owner is not None:
            owner.release(run_dir)


def report_failure(
    bus: EventBus, error: BaseException, session: TrainingSession | None, run_dir: Path | None = None
) -> None:
    """An `error` event (not for Ctrl-C; its message from trainer.run.storage.failure_message, which
    names a full disk) and the `end` event of a run that did not finish."""
    interrupted = isinstance(error, KeyboardInterrupt)
    if not interrupted:
        folder = run_dir if run_dir is not None else session.run_dir if session is not None else None
        bus.emit_last("error", message=failure_message(error, folder), traceback=traceback.format_exc())
    bus.emit_last(
        "end",
        status="stopped" if interrupted else "failed",
        step=session.global_step if session else 0,
        final_model=None,
    )


class TrainingSession:
    """One training run's state: env, algorithm (its policy, optimiser, storage), counters.

    run_dir None keeps everything in memory: no config, events, checkpoints, GIFs or final model
    are written (the Python API's default). env_factory (num_envs, device, seed) -> VecEnv replaces
    the config's env (the API's Gymnasium factories and VecEnv objects).
    """

    def __init__(
        self,
        config: TrainConfig,
        run_dir: Path | None,
        bus: EventBus,
        context: DistributedContext | None = None,
        env_factory: EnvFactory | None = None,
        experience: ExperienceSource | None = None,
    ):
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
        set_threads(config, self.device, self.world_size)
        self._pending_logs: list[str] = []  # said before the start event; emitted right after it
        self._started = False
        start = seeds(config.seed, self.rank)

        torch.manual_seed(start.network)  # network initialisation: the same on every rank
        make_env = env_factory or config_env_factory(config, log=self._pending_logs.append)
        self.env = make_env(config.num_envs, self.device, start.env)
        if env_factory is not None and getattr(self.env, "vectorization", None):
            self._pending_logs.append(self.env.vectorization)  # the config's factory logs it itself
        self.policy_spec = policy_spec(config, self.env)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(start.sampling)
        self.algorithm: Algorithm = algorithm_class(config.algo)(
            Setup(
                config,
                self.env,
                self.device,
                self.policy_spec,
                self.generator,
                reduce_mean=context.all_reduce_mean_ if context is not None else None,
                reduce_sum=self._reduce_sum,
                broadcast=context.broadcast_module_ if context is not None else None,
                log=self._log,
                experience=experience,
            )
        )
        self.policy_spec = self.policy.spec  # the algorithm's network (its kind: spec["network"])
        self.blank_metrics = metric_blanks(self.algorithm)  # the metrics this algorithm leaves null
        self.base_learning_rate, lr_message = scaled_learning_rate(config, self.world_size)
        if lr_message:
            self._pending_logs.append(lr_message)

        self.steps_per_update = self.algorithm.steps_per_update * self.world_size
        self.num_updates = -(-config.total_timesteps // self.steps_per_update)
        self.global_step = 0
        self.update = 0
        self.episodes = 0
        self.elapsed_before = 0.0  # training seconds of earlier sessions (resumed runs, earlier learn())
        self.session_started = time.perf_counter()
        self.session_start_step = 0
        self.resumed_from_step: int | None = None
        self.last_metrics: dict | None = None
        self.last_checkpoint_at: float | None = None  # perf_counter of the last checkpoint saved
        self.gif_schedule = GifSchedule(config.gif_interval, config.gif_max_frames, config.gif_time_fraction)
        self.next_obs = self.env.reset(seed=start.env)
        self.algorithm.start(self.next_obs)
        if self.is_main and config.gif_interval and run_dir is not None:
            from trainer.run.gif import GifRecorder

            make_gif_env = env_factory or config_env_factory(config, in_process=True)
            self.gif_recorder = GifRecorder(
                lambda: make_gif_env(1, "cpu", start.gif_env), self.policy_spec, config.gif_max_frames
            )

    @property
    def policy(self) -> ActorCritic:
        """The playing network (the one saved in models and checkpoints, exported and served)."""
        return self.algorithm.policy

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> TrainResult:
        """Train until `num_updates` (or a stop), then save the final model (when there is a run_dir)."""
        self._emit_start()
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
            try:
                statistics = self.train_one_update()  # the algorithm's collect -> update
            except ExperienceClosed:  # the actors' source is stopping (a learner's SIGTERM): as a stop
                self.update -= 1
                status = "stopped"
                self.bus.log(f"stop requested while waiting for experience: saving at step {self.global_step}")
                break
            self.global_step += self.steps_per_update
            emit_metrics(self, statistics)
            if self._writes_files and checkpoint_due(self):
                save_checkpoint(self)
                last_checkpoint_update = self.update
            if self.gif_recorder is not None and self.gif_schedule.due(time.perf_counter()):
                record_gif(self, self.training_seconds())
        final_model = None
        if self._writes_files:
            if last_checkpoint_update != self.update:
                save_checkpoint(self)
            final_model = save_final_model(self)
            if self.gif_recorder is not None and self.update > 0 and status == "finished":
                record_gif(self, training_seconds=None)  # after training: it slows nothing
        if self.is_main:
            self.bus.emit(
                "end", status=status, step=self.global_step, final_model=str(final_model) if final_model else None
            )
        # Seconds of this session count as earlier time for a later run() (the API's learn() again).
        self.elapsed_before = self.training_seconds()
        self.session_started = time.perf_counter()
        self.resumed_from_step = self.global_step
        return TrainResult(status, self.global_step, self.run_dir, final_model, self.last_metrics, self.policy)

    def train_one_update(self) -> dict:
        """One update: the algorithm collects `steps_per_update` steps from the env, then learns
        from them. Returns its statistics and the learning rate."""
        progress = Progress(self.update, self.num_updates, self.global_step, self.learning_rate())
        self.next_obs = self.algorithm.collect(self.next_obs, progress)
        statistics = self.algorithm.update(progress)
        statistics["learning_rate"] = progress.learning_rate
        return statistics

    def learning_rate(self) -> float:
        """For the update about to run (self.update is 1-based): linear decay to 0 when anneal_lr."""
        if not self.config.anneal_lr:
            return self.base_learning_rate
        return self.base_learning_rate * (1.0 - (self.update - 1) / self.num_updates)

    def recount_updates(self) -> None:
        """After a restore: the world size may have changed (an elastic re-formation), so the
        steps still missing to `total_timesteps` decide how many updates remain."""
        remaining = max(0, self.config.total_timesteps - self.global_step)
        self.num_updates = self.update + -(-remaining // self.steps_per_update)

    def extend(self, timesteps: int) -> None:
        """Train `timesteps` more steps (rounded up to whole updates) on the next run()."""
        self.num_updates = self.update + max(1, -(-int(timesteps) // self.steps_per_update))

    def training_seconds(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.session_started

    # -- events -----------------------------------------------------------------------------------

    def _emit_start(self) -> None:
        if not self.is_main:
            return
        if self._writes_files:
            write_config(self.run_dir, self.config)
        self.bus.emit(
            "start",
            run_id=self.run_dir.name if self.run_dir is not None else "in-memory",
            config=self.config.to_dict(),
            device=str(self.device),
            total_timesteps=self.global_step + (self.num_updates - self.update) * self.steps_per_update,
            resumed_from_step=self.resumed_from_step,
            world_size=self.world_size,
            num_updates=self.num_updates,
        )
        for message in self._pending_logs:
            self.bus.log(message)
        self._pending_logs.clear()
        self._started = True

    def _stop_requested(self, should_stop: Callable[[], bool]) -> bool:
        requested = bool(should_stop()) if self.is_main else False
        if self.context is not None:
            requested = self.context.any_rank(requested, self.device)
        return requested

    def _log(self, message: str) -> None:
        """A log line from the algorithm: after the start event once it was sent, else right after it."""
        if self._started:
            self.bus.log(message)
        else:
            self._pending_logs.append(message)

    def _reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.context is not None:
            self.context.all_reduce_sum_(tensor)

    @property
    def _writes_files(self) -> bool:
        return self.is_main and self.run_dir is not None

    # -- resuming (the payloads: trainer/run/resume.py) ------------------------------------------------

    def restore(self) -> None:
        """Continue from the newest loadable checkpoint of this run (trainer/run/resume.py)."""
        resume_session(self)

    def close(self) -> None:
        if self.gif_recorder is not None:
            self.gif_recorder.close()
            self.gif_recorder = None
        if self.env is not None:
            self.env.close()
            self.env = None
