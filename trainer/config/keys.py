"""Training configuration: every key declared once, loaded from YAML, overridden from the command
line, validated in one place with errors a person can act on.

    from trainer.config.defaults import load_config
    config = load_config("configs/cartpole.yaml", overrides=["learning_rate=1e-3"])

Each key below is one `key(...)` declaration: default, help text (the config reference, built into
docs/config.md), check (trainer/config/checks.py: type, range, studio control) and studio group. The
studio's form, `--set`, YAML, the Python API and `UpdateSettings.from_config` all derive from them.
Beside this file: declaring.py (the declarations read back: `declared_keys`, `declare_algorithm`),
loading.py (YAML, `--set`), validation.py (`config_from_dict`), reference.py (the tables) and
batching.py (the batch vocabulary and its one rule).

An algorithm's own keys (PPO's `clip_coef`, ...) are declared the same way beside it (trainer/algos/)
and handed to `ALGORITHM_TABLE` (algorithm_keys.py) when it registers: this room never imports the
algorithms. A config holds its `algo`'s keys only, read as `config.clip_coef`, written flat in YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.config.algorithm_keys import AlgorithmSettings, RegisteredAlgorithm
from trainer.config.batching import DEFAULT_MINI_BATCH_SIZE, DEFAULT_NUM_STEPS
from trainer.config.checks import (
    Boolean,
    Check,
    Choice,
    Device,
    DeviceIds,
    EntryPoints,
    Integer,
    Mapping,
    ModelType,
    Real,
    Sizes,
    Text,
    VectorEnv,
    WorkerCount,
)

MODEL_TYPES = {
    "ppo-small": "MLP, two hidden layers of 64 (actor and critic each)",
    "ppo-medium": "MLP, two hidden layers of 256",
    "ppo-large": "MLP, three hidden layers of 512, 512, 256",
    "ppo-cnn": "convolutional torso for image or grid observations, then 512 units",
    "ppo-lstm": "recurrent: Linear 64 + tanh, an LSTM of 64 (hidden state carried through episodes; PPO / A2C)",
}
LR_SCALING_RULES = ("none", "sqrt", "linear")
DISTRIBUTED_BACKENDS = ("auto", "gloo", "nccl")

# Where the studio shows a key: "basic" above the Advanced section, or an Advanced group title,
# in this order. A key without a group is not in the form and says why (`studio_note`).
BASIC = "basic"
STUDIO_GROUPS = (
    BASIC,
    "Rollout and optimiser",
    "PPO",
    "Normalisation and prioritised minibatches",
    "Environment options",
    "Processes and cluster",
    "Checkpoints, GIFs and logs",
    "Replay buffer and targets",
    "DQN",
    "SAC",
)
ROLLOUT, PPO, NORMALISATION, ENVIRONMENT, CLUSTER, OUTPUTS, REPLAY, DQN, SAC = STUDIO_GROUPS[1:]


def key(
    default: Any, help: str, check: Check, group: str | None = None, studio_note: str | None = None, factory: Any = None
) -> Any:
    """Declare one config key: all that is known about it, in one place."""
    assert (group is None) != (studio_note is None), "a key is in the form or says why not"
    metadata = {"help": help, "check": check, "group": group, "studio_note": studio_note}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class CheckpointConfig:
    interval: int = key(
        50,
        "Save a checkpoint every this many updates (0: only when the run ends or is stopped).",
        Integer(minimum=0, maximum=10**9),
        OUTPUTS,
    )
    path: str | None = key(
        None,
        "Folder for checkpoints; relative paths are inside the run directory. Default: `<run_dir>/checkpoints`.",
        Text(optional=True, max_length=4096),
        studio_note="the studio always keeps checkpoints inside the run folder",
    )
    keep: int = key(
        3, "Keep the last this many checkpoints (older ones are deleted).", Integer(maximum=10_000), OUTPUTS
    )
    keep_best: bool = key(
        True,
        "Also keep the checkpoint with the best `recent_return_mean` (recorded in "
        "`best.json` beside the checkpoints), however old; resume still takes the newest.",
        Boolean(),
        OUTPUTS,
    )
    interval_seconds: float = key(
        0.0,
        "Also save a checkpoint when this many seconds have passed since the last "
        "one (0: off). Bounds the work a crash or an elastic restart redoes.",
        Real(0.0, 10.0**7),
        OUTPUTS,
    )


MODEL_TYPE_HELP = "Policy network: " + "; ".join(f"`{name}` {text}" for name, text in MODEL_TYPES.items()) + "."


@dataclass
class TrainConfig(AlgorithmSettings):
    # --- what to train --------------------------------------------------------------------
    env_name: str = key(
        "cartpole",
        "Environment: `cartpole`, `flappy_bird`, `snake` (or aliases such as "
        "`CartPole-v1`, `FlappyBirdPygame-v0`), any Gymnasium id (`Acrobot-v1`) or "
        "`package.module:Class`.",
        Text(),
        BASIC,
    )
    env_kwargs: dict = key(
        None,
        "Options passed to the environment, e.g. `{grid_size: 12}` for snake.",
        Mapping(),
        ENVIRONMENT,
        factory=dict,
    )
    wrappers: list = key(
        None,
        "Gymnasium wrappers `package.module:WrapperClass` applied to every env "
        "(built-ins then run through the Gymnasium adapter).",
        EntryPoints(),
        ENVIRONMENT,
        factory=list,
    )
    model_type: str = key(
        "ppo-small", MODEL_TYPE_HELP, ModelType(choices=tuple(MODEL_TYPES), described=tuple(MODEL_TYPES.items())), BASIC
    )
    hidden_sizes: list | None = key(
        None,
        "Hidden layer sizes of an MLP policy, e.g. `[128, 128]`, instead of "
        "`model_type`'s (null: as `model_type` says).",
        Sizes(),
        ROLLOUT,
    )
    algo: str = key(
        "ppo",
        "Learning algorithm: `ppo` (clipped surrogate, several epochs), `a2c` (one unclipped pass "
        "per rollout), or another one registered (trainer/algos/registry.py). Its own keys follow.",
        RegisteredAlgorithm(),
        ROLLOUT,
    )
    seed: int = key(
        1,
        "Seeds the envs, the network initialisation and the action sampling: same seed, same run (on CPU).",
        Integer(minimum=0, maximum=2**31 - 1),
        BASIC,
    )
    device: str = key("auto", "`auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:N`.", Device(), BASIC)
    total_timesteps: int = key(
        1_000_000,
        "Environment steps to train for, summed over all envs (alias: "
        "`max_steps`). Rounded up to a whole number of updates.",
        Integer(maximum=10**13),
        BASIC,
    )
    # --- how much data per update ---------------------------------------------------------
    num_envs: int = key(
        64, "Environments stepped in parallel (per process when distributed).", Integer(maximum=2**20), BASIC
    )
    num_steps: int | None = key(
        None,
        f"Steps collected from every env per update (rollout length). Default: "
        f"derived from `batch_size`, else {DEFAULT_NUM_STEPS}.",
        Integer(maximum=100_000, optional=True),
        ROLLOUT,
    )
    batch_size: int | None = key(
        None,
        "Samples per update = `num_envs x num_steps`. Give this or `num_steps`; the other is derived.",
        Integer(maximum=2**40, optional=True),
        studio_note="derived: num_envs x num_steps (shown under the form)",
    )
    mini_batch_size: int | None = key(
        None,
        f"Samples per gradient step; must divide `batch_size`. Default: "
        f"{DEFAULT_MINI_BATCH_SIZE} (or the largest divisor of `batch_size` below "
        f"it); `a2c`: the whole batch.",
        Integer(maximum=2**40, optional=True),
        ROLLOUT,
    )
    num_minibatches: int | None = key(
        None,
        "CleanRL's way to say the same thing: `mini_batch_size = batch_size / num_minibatches`.",
        Integer(maximum=2**40, optional=True),
        studio_note="derived: batch_size / mini_batch_size",
    )
    # --- the optimiser --------------------------------------------------------------------------
    learning_rate: float = key(2.5e-4, "Adam step size (before `lr_scaling`).", Real(0.0, 1.0, low_open=True), ROLLOUT)
    anneal_lr: bool = key(True, "Decay the learning rate linearly to 0 over the run.", Boolean(), ROLLOUT)
    lr_scaling: str = key(
        "none",
        "`sqrt`: learning rate x sqrt(samples per gradient step / `lr_reference_batch`) "
        "(the guides' rule of thumb for bigger batches); `linear`: x the ratio; `none`: as "
        "given. Samples per gradient step = `mini_batch_size` x number of processes.",
        Choice(choices=LR_SCALING_RULES, off="none"),
        ROLLOUT,
    )
    lr_reference_batch: int = key(
        256,
        "The samples per gradient step that `learning_rate` was tuned for (used by `lr_scaling`).",
        Integer(maximum=2**40),
        ROLLOUT,
    )
    gamma: float = key(0.99, "Discount factor.", Real(0.0, 1.0), ROLLOUT)
    norm_obs: bool = key(
        False, "Normalise observations with running mean / std (saved in the model).", Boolean(), NORMALISATION
    )
    norm_reward: bool = key(
        False, "Scale rewards by the running std of the discounted return.", Boolean(), NORMALISATION
    )
    # --- where and how it runs -------------------------------------------------------------
    vector_env: bool | str | None = key(
        None,
        "Gymnasium envs only: `pool` (our shared-memory worker pool: "
        "`num_workers` processes share the envs), `async_pool` (the pool in two "
        "halves, stepping one while the policy acts on the other), `sync` (in this "
        "process), `async` (Gymnasium's AsyncVectorEnv, one process per env); true "
        "or null with `num_workers` > 1: `pool`. Built-in games are already "
        "batched tensor envs and ignore it.",
        VectorEnv(),
        ENVIRONMENT,
    )
    num_workers: int | str | None = key(
        None,
        "Gymnasium envs only: worker processes of the pool (`auto`: one per CPU core the run may use).",
        WorkerCount(maximum=1024),
        ENVIRONMENT,
    )
    torch_threads: int = key(
        0,
        "CPU threads for torch (0: auto = 1 for MLPs; for `ppo-cnn` the usable cores: the "
        "affinity mask capped by the cgroup CPU quota, as under `docker run --cpus`).",
        Integer(minimum=0, maximum=1024),
        OUTPUTS,
    )
    backend: str = key(
        "auto",
        "torch.distributed backend under torchrun: `auto` (nccl on CUDA, gloo on CPU), `gloo`, `nccl`.",
        Choice(choices=DISTRIBUTED_BACKENDS),
        studio_note="the studio's ranks use `auto`: gloo on CPU, nccl on CUDA",
    )
    gpu_ids: list | None = key(
        None,
        "CUDA devices to use, e.g. `[0, 1]`; under torchrun, local rank i uses `gpu_ids[i]`.",
        DeviceIds(),
        studio_note="only used by distributed (torchrun) runs; pick the GPU with `device`",
    )
    nproc_per_node: int = key(
        1,
        "Training processes (ranks) on this machine, started by torch's elastic launcher "
        "(`--nproc`); with `gpu_ids`, one rank per listed GPU on nccl, else gloo on CPU.",
        Integer(maximum=1024),
        CLUSTER,
    )
    min_nodes: int = key(
        1,
        "Elastic cluster: train once this many machines (master included) have joined (torchrun's `--nnodes MIN:MAX`).",
        Integer(maximum=10_000),
        CLUSTER,
    )
    max_nodes: int = key(
        1,
        "Elastic cluster: admit up to this many machines; a machine that joins mid-run is "
        "admitted at the next re-formation.",
        Integer(maximum=10_000),
        CLUSTER,
    )
    max_restarts: int = key(
        3,
        "Elastic runs: how often the ranks may be re-formed after a failure (a lost "
        "process or machine) before the run fails; each restart resumes from the last "
        "checkpoint.",
        Integer(minimum=0, maximum=10_000),
        CLUSTER,
    )
    local_actors: int = key(
        0,
        "Actor-learner runs (an algo that learns from actors: impala, appo, dqn, sac): actor "
        "processes started on this machine beside the learner (`--actors`); 0: the algorithm plays "
        "its own envs, or actors join from other machines (`python -m trainer master`).",
        Integer(minimum=0, maximum=256),
        CLUSTER,
    )
    learner_queue_batches: int = key(
        2,
        "Actor-learner runs: actors' batches the learner keeps waiting; when it falls behind, the "
        "oldest are dropped (and counted), so memory stays bounded. Small keeps what it learns from "
        "fresh: a long queue of fast actors' batches is as many updates old as it is long.",
        Integer(minimum=1, maximum=100_000),
        CLUSTER,
    )
    # --- what it writes --------------------------------------------------------------------
    checkpoint: CheckpointConfig = field(
        default_factory=CheckpointConfig,
        metadata={
            "help": "`interval` (updates), `path` (folder), `keep` (how many); see below.",
            "section": CheckpointConfig,
        },
    )
    gif_interval: float = key(
        10.0,
        "Seconds between rollout GIFs: the first right after the first update, then "
        "one every this many seconds (the studio's picture is never much older), and one at "
        "the end (0: never).",
        Real(0.0, 1e9),
        OUTPUTS,
    )
    gif_max_frames: int = key(
        300,
        "Longest GIF, in frames (a longer episode is played on, undrawn, to learn how it "
        "ends; the caption says what was cut).",
        Integer(maximum=100_000),
        OUTPUTS,
    )
    gif_time_fraction: float = key(
        0.1,
        "GIFs are cut shorter (to 30 frames at least) while they would take more than this fraction "
        "of the training time (1: never cut).",
        Real(0.0, 1.0),
        OUTPUTS,
    )
    log_interval: int = key(
        10,
        "Write a `[STEP n] ...` log line every this many updates (metrics events go out every update).",
        Integer(maximum=10**9),
        OUTPUTS,
    )
    warn_falling_updates: int = key(
        10,
        "Warn (studio banner, log line, the `RLStudioReturnFalling` alert) when the "
        "recent mean return has fallen for this many consecutive updates.",
        Integer(minimum=2, maximum=10**6),
        OUTPUTS,
    )
    tensorboard: bool = key(
        False,
        "Also write TensorBoard scalars to `<run_dir>/tensorboard` (needs the tensorboard package).",
        Boolean(),
        OUTPUTS,
    )
    # The chosen algorithm's own keys by name (declared beside it, see ALGORITHM_TABLE): not a key
    # itself; read as `config.clip_coef`, written flat after `algo` by to_dict (AlgorithmSettings).
    algo_settings: dict = field(default_factory=dict, metadata={"algo_settings": True})

    def ranks_per_node(self) -> int:
        """The training processes on each machine: `nproc_per_node`, else one per listed GPU (`gpu_ids`)."""
        if self.nproc_per_node > 1 or not self.gpu_ids:
            return self.nproc_per_node
        return len(self.gpu_ids)


KEY_ALIASES = {
    "max_steps": "total_timesteps",
    "n_envs": "num_envs",
    "n_steps": "num_steps",
    "n_epochs": "update_epochs",
    "lr": "learning_rate",
    "env": "env_name",
    "env_id": "env_name",
    "net_arch": "hidden_sizes",
    "train_freq": "num_steps",  # SB3 / CleanRL: env steps (per env) between updates of DQN and SAC
}
