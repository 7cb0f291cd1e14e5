"""The Python API, shaped like Stable-Baselines3's:

    from trainer import PPO
    model = PPO("flappy_bird", num_envs=128, learning_rate=5e-4)   # or any Gymnasium id / env factory
    model.learn(total_timesteps=1_000_000, progress_bar=True)       # call again to continue training
    model.save("flappy.pth")
    model = PPO.load("flappy.pth")
    action, _ = model.predict(obs, deterministic=True)

Keyword arguments are the YAML keys (declared in `trainer/config/keys.py`, validated by
`trainer/config/validation.py`); a built-in game starts from its tuned `configs/<game>.yaml`, as in
the studio, any other env from the defaults for its kind of actions
(`trainer.config.defaults.untuned_defaults`). `env` is a name (built-in,
Gymnasium id, `package.module:Class`), a callable returning a `gymnasium.Env` (vectorised as
`vector_env` / `num_workers` say: in this process by default, the shared-memory worker pool
with `num_workers` > 1, for which the callable is sent to the workers with cloudpickle), or a
`VecEnv` object (used as it is: its num_envs and device).

Nothing is written unless `run_dir` is given: then it is a run folder like the CLI's (config,
metrics.jsonl, train.log, checkpoints, GIFs, a final model after each `learn`).

`learn(total_timesteps)` trains that many *more* steps (SB3's `reset_num_timesteps=False`): the
env, optimiser, counters and random streams carry on, and with `anneal_lr` the learning rate
decays over the new horizon (steps so far + total_timesteps) from where it is.

Every registered algorithm (trainer/algos/registry.py) has a class: `PPO`, `A2C`, `DQN` and `SAC` here, any
other from `api_class("name")`; `Model.load(path)` gives the class of the algorithm the file names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.algos.registry import registration
from trainer.api_envs import check_fixed, wrap_env
from trainer.config.checks import ConfigError
from trainer.config.declaring import key_names
from trainer.config.defaults import shipped_config, untuned_defaults
from trainer.config.keys import TrainConfig
from trainer.config.loading import merge_settings
from trainer.config.permissions import require_code_permission
from trainer.config.validation import config_from_dict
from trainer.run.checkpoint import TrainedModel, atomic_save, read_checkpoint
from trainer.run.events import EventBus
from trainer.run.loop import TrainingSession, report_failure
from trainer.run.owner import RunOwner, take_ownership
from trainer.run.resume import checkpoint_payload, restore
from trainer.run.setup import open_run_dir
from trainer.run.sinks import LogSink, ProgressBarSink

# callback(metrics event, model) -> False stops training; None / True go on
Callback = Callable[[dict, "Model"], "bool | None"]


class Model:
    """An algorithm trained from Python on any env the studio can train. `PPO`, `A2C` and the
    classes of `api_class` each train one `algo` (DQN and SAC too); `Model.load` takes it from the file."""

    algo: str | None = None

    def __init__(self, env: Any = "cartpole", *, run_dir: str | Path | None = None, verbose: int = 0, **settings: Any):
        """env: see the module docstring. run_dir: None (nothing written) or a run folder.
        verbose: 1 prints the `[STEP n] ...` log lines. settings: YAML keys (`num_envs=128`)."""
        if type(self).algo is None:
            raise TypeError("Model trains no algorithm of its own: use PPO, A2C, DQN, SAC or api_class(name)")
        settings = self._settings(settings)
        env_factory = None
        if isinstance(env, str):
            config = shipped_config(env, settings)
        else:
            label, make_factory, fixed, action_space = wrap_env(env)
            base = merge_settings(untuned_defaults(action_space, settings["algo"]), {"env_name": label, **fixed})
            config = config_from_dict(merge_settings(base, check_fixed(settings, fixed)))
            env_factory = make_factory(config)
        self.config: TrainConfig = config
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self._bus = EventBus()
        self._owner: RunOwner | None = None
        self._session: TrainingSession | None = None
        try:
            if self.run_dir is not None:
                self._owner = take_ownership(self.run_dir)
                open_run_dir(self._bus, self.run_dir, config)
            self._console = LogSink(stream=sys.stdout, log_interval=config.log_interval, timestamps=False)
            if verbose:
                self._bus.sinks.append(self._console)
            self._session = TrainingSession(config, self.run_dir, self._bus, None, env_factory)
        except BaseException:
            self.close()
            raise

    @classmethod
    def _settings(cls, settings: dict) -> dict:
        algo = settings.pop("algo", cls.algo)
        if algo != cls.algo:
            raise ConfigError(
                f"{cls.__name__}(...) trains algo {cls.algo!r}, got algo={algo!r}; use {_class_name(algo)}(...) instead"
            )
        return {**settings, "algo": cls.algo}

    # -- training -----------------------------------------------------------------------------------

    def learn(
        self, total_timesteps: int, callback: Callback | list[Callback] | None = None, progress_bar: bool = False
    ) -> Model:
        """Train `total_timesteps` more environment steps (rounded up to whole updates).
        callback(metrics, model) runs after every update; returning False stops training."""
        if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, int) or total_timesteps < 1:
            raise ConfigError(f"total_timesteps must be a positive integer, got {total_timesteps!r}")
        session = self._live_session()
        session.extend(total_timesteps)
        session.config.total_timesteps = session.num_updates * session.steps_per_update  # config.yaml says it
        callbacks = _callbacks(callback)
        stopper = _CallbackSink(callbacks, self)
        extra = [stopper] + ([ProgressBarSink(total=session.config.total_timesteps)] if progress_bar else [])
        console = self._console in self._bus.sinks
        if progress_bar and console:  # the bar prints the log lines above itself
            self._bus.sinks.remove(self._console)
        self._bus.sinks += extra
        try:
            self.last_result = session.run(stopper.stop_requested)
        except BaseException as error:
            report_failure(self._bus, error, session)
            raise
        finally:
            for sink in extra:
                sink.close()
                if sink in self._bus.sinks:
                    self._bus.sinks.remove(sink)
            if progress_bar and console:
                self._bus.sinks.append(self._console)
        if stopper.error is not None:
            raise stopper.error
        return self

    # -- acting -------------------------------------------------------------------------------------

    def predict(
        self,
        obs: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Any = None,
    ) -> tuple[Any, Any]:
        """(actions, state) for one observation or a batch, as numpy (SB3's signature and default:
        sampled unless deterministic=True). `action_masks` (sb3-contrib's MaskablePPO keyword):
        bools (n,) or (B, n), True where the action is allowed; others are never chosen.

        A recurrent model (`model_type: ppo-lstm`) answers as sb3-contrib's RecurrentPPO: `state`
        is None at the start (or what the last call returned: (h, c), each (1, B, size)) and comes
        back updated; `episode_start` (B booleans) zeroes it where an episode starts. Any other
        model returns `state` as it was given."""
        session = self._live_session()
        acting = TrainedModel(
            session.policy,
            {
                "config": session.config.to_dict(),
                "policy_spec": session.policy_spec,
                "global_step": session.global_step,
            },
            session.device,
        )
        return acting.predict(
            obs, deterministic=deterministic, state=state, episode_start=episode_start, action_masks=action_masks
        )

    # -- saving and loading ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """A weights-only `.pth` (the trainer's checkpoint format: `load_model(path)` plays it,
        `<class>.load(path)` continues training it exactly)."""
        return atomic_save(checkpoint_payload(self._live_session()), Path(path))

    @classmethod
    def load(
        cls,
        path: str | Path,
        env: Any = None,
        *,
        run_dir: str | Path | None = None,
        allow_custom_code: bool = False,
        **settings: Any,
    ) -> Model:
        """A model saved by `save()` (or any trainer checkpoint / final model), ready to predict
        or learn on. env: the env to learn on (default: the saved env_name; pass the same factory
        or VecEnv for a model trained on one). settings override the saved config.
        allow_custom_code: a file is data, so a saved `module:Class` env or wrapper is imported
        only when this is True (built-ins and registered Gymnasium ids always load).
        `Model.load` builds the class of the file's algorithm (registered in this process)."""
        payload = read_checkpoint(path)
        saved = dict(payload.get("config") or {})
        from_file = {
            "env_name": saved.get("env_name") if env is None else None,
            "wrappers": saved.get("wrappers") if "wrappers" not in settings else None,
        }
        require_code_permission(
            from_file, allow_custom_code, str(path), f"{cls.__name__}.load(..., allow_custom_code=True)"
        )
        saved_algo = str(saved.pop("algo", None) or payload.get("algo") or "ppo")
        if cls.algo is None:
            try:
                cls = api_class(saved_algo)
            except ValueError as error:
                raise ConfigError(f"{path} was trained with algo {saved_algo!r}: {error}") from None
        if saved_algo != cls.algo:
            raise ConfigError(
                f"{path} was trained with algo {saved_algo!r}; load it with "
                f"{_class_name(saved_algo)}.load (or Model.load)"
            )
        base = merge_settings(saved, settings)
        if env is None:
            env = base.pop("env_name", "cartpole")
        else:
            base.pop("env_name", None)
            for name in ("num_envs", "device", "gif_interval", "batch_size", "num_minibatches"):
                if name not in settings and not isinstance(env, str):
                    base.pop(name, None)  # taken from the env object given
        model = cls(env, run_dir=run_dir, **{name: value for name, value in base.items() if name in key_names()})
        session = model._live_session()
        if session.device.type != "cpu":
            payload = read_checkpoint(path, map_location=session.device)
        try:
            restore(session, payload, path)
        except BaseException:
            model.close()
            raise
        return model

    # -- the rest -----------------------------------------------------------------------------------

    @property
    def policy(self):
        return self._live_session().policy

    @property
    def env(self):
        return self._live_session().env

    @property
    def num_timesteps(self) -> int:
        return self._live_session().global_step

    @property
    def last_metrics(self) -> dict | None:
        return self._live_session().last_metrics

    def close(self) -> None:
        """Close the env (worker processes, windows) and give the run folder back."""
        if self._session is not None:
            self._session.close()
            self._session = None
        self._bus.close()
        if self._owner is not None:
            self._owner.release(self.run_dir)
            self._owner = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _live_session(self) -> TrainingSession:
        if self._session is None:
            raise RuntimeError(
                f"this {type(self).__name__} was closed; make a new one or {type(self).__name__}.load a saved one"
            )
        return self._session

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.config.env_name!r}, model_type={self.config.model_type!r}, "
            f"num_envs={self.config.num_envs}, steps={self._session.global_step if self._session else '-'})"
        )


class PPO(Model):
    """Proximal Policy Optimisation (algo ppo): clipped surrogate, several epochs per rollout."""

    algo = "ppo"


class A2C(Model):
    """Advantage Actor-Critic (algo a2c): one unclipped pass over each rollout."""

    algo = "a2c"


class DQN(Model):
    """Deep Q-learning (algo dqn) from a replay buffer: double Q, dueling heads, n-step, prioritised replay."""

    algo = "dqn"


class SAC(Model):
    """Soft Actor-Critic (algo sac) for continuous actions: twin Q, target networks, entropy tuning."""

    algo = "sac"


BUILT_IN: dict[str, type[Model]] = {cls.algo: cls for cls in (PPO, A2C, DQN, SAC)}
_CLASSES: dict[object, type[Model]] = {}  # by registration: a name registered again gets a class of its own


def api_class(algo: str) -> type[Model]:
    """The class that trains a registered algorithm: `api_class("reinforce")("cartpole").learn(...)`
    (PPO, A2C, DQN and SAC for theirs). ValueError for a name that is not registered."""
    found = registration(algo)
    if found.name in BUILT_IN:
        return BUILT_IN[found.name]
    if found not in _CLASSES:
        _CLASSES[found] = type(
            found.class_name,
            (Model,),
            {"algo": found.name, "__module__": __name__, "__doc__": found.summary or found.name},
        )
    return _CLASSES[found]


def _class_name(algo: Any) -> str:
    """What to call the class of `algo` in a message (api_class(...) for a name not registered)."""
    try:
        return api_class(algo).__name__
    except ValueError:
        return f"api_class({str(algo)[:40]!r})"


# ---------------------------------------------------------------------------------------------
# Callbacks


def _callbacks(callback: Callback | list[Callback] | None) -> list[Callback]:
    callbacks = [] if callback is None else list(callback) if isinstance(callback, (list, tuple)) else [callback]
    for item in callbacks:
        if not callable(item):
            raise ConfigError(f"callback must be a callable callback(metrics, model) or a list of them, got {item!r}")
    return callbacks


class _CallbackSink:
    """Runs the callbacks on every metrics event; the loop polls `stop_requested` between updates.
    A callback's exception stops training and is raised again by learn() (the event bus would
    otherwise only detach a failing sink)."""

    def __init__(self, callbacks: list[Callback], model: Model):
        self.callbacks, self.model = callbacks, model
        self.stop = False
        self.error: BaseException | None = None

    def __call__(self, event: dict) -> None:
        if event["type"] != "metrics" or self.stop:
            return
        for callback in self.callbacks:
            try:
                if callback(event, self.model) is False:
                    self.stop = True
            except Exception as error:  # noqa: BLE001 - raised again by learn()
                self.error, self.stop = error, True
                return

    def stop_requested(self) -> bool:
        return self.stop

    def close(self) -> None:
        pass
