"""An algorithm is one class and one `register` call (trainer/algos/base.py, registry.py).

The proof: a tiny REINFORCE, written and registered here and nowhere in the product, trains
CartPole through all four doors, `python -m trainer`, the Python API, the studio's /start and
`train()` itself; it learns, resumes exactly, and its model plays through `load_model`. The
config, the studio form and the registry are checked around it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

from trainer.algos.adam import Adam
from trainer.algos.base import Algorithm, Progress, Setup
from trainer.algos.registry import ALGORITHMS, register, unregister
from trainer.algos.rollout import RolloutBuffer, collect_rollout, score_rollout
from trainer.config.checks import Boolean, ConfigError
from trainer.config.keys import ROLLOUT, key
from trainer.nets.build import build_policy

REPO = Path(__file__).resolve().parents[1]
RANDOM_CARTPOLE = 22.0  # mean episode length of a random policy
# REINFORCE on the shipped CartPole config's envs: 16 envs x 128 steps, 40 updates (~82k steps)
SETTINGS = {
    "algo": "reinforce",
    "num_envs": 16,
    "num_steps": 128,
    "learning_rate": 0.005,
    "anneal_lr": False,
    "total_timesteps": 16 * 128 * 40,
    "gif_interval": 0,
    "device": "cpu",
    "seed": 1,
}


# ----------------------------------------------------------------------------- the algorithm


@dataclass(frozen=True)
class ReinforceKeys:
    return_baseline: bool = key(
        True, "Standardise the returns-to-go of each batch (a baseline: less variance).", Boolean(), ROLLOUT
    )


class Reinforce(Algorithm):
    """REINFORCE (Williams 1992): raise log pi(a|s) in proportion to the return that followed."""

    summary = "policy gradient with returns-to-go, no critic (Williams 1992)"
    keys = ReinforceKeys
    metric_names = ("policy_loss", "entropy", "gradient_steps")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        config = setup.config
        self.policy = build_policy(setup.policy_spec).to(setup.device)
        self.optimizer = Adam(self.policy)
        self.buffer = RolloutBuffer.allocate(
            config.num_steps, config.num_envs, tuple(setup.policy_spec["obs_shape"]), self.policy, setup.device
        )
        self.steps_per_update = config.batch_size

    def collect(self, obs: torch.Tensor, progress: Progress) -> torch.Tensor:
        obs = collect_rollout(self.setup.env, self.policy, self.buffer, obs, self.setup.generator, None)
        score_rollout(self.policy, self.buffer, self.setup.config.gamma)  # episode ends (dones)
        return obs

    def update(self, progress: Progress) -> dict:
        buffer, gamma = self.buffer, self.setup.config.gamma
        returns, later = torch.zeros_like(buffer.rewards), torch.zeros_like(buffer.rewards[0])
        for t in reversed(range(returns.shape[0])):  # G_t = r_t + gamma G_{t+1}, cut where an episode ended
            later = returns[t] = buffer.rewards[t] + gamma * later * (1.0 - buffer.dones[t])
        returns = returns.flatten()
        if self.setup.config.return_baseline:
            returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        log_prob, entropy, _ = self.policy.evaluate(buffer.obs.flatten(0, 1), buffer.actions.flatten(0, 1))
        loss = -(log_prob * returns).mean()
        self.optimizer.check_parameters()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.clip_grad_norm(0.5)
        self.optimizer.step(progress.learning_rate)
        return {"policy_loss": loss.item(), "entropy": entropy.mean().item(), "gradient_steps": 1}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


@pytest.fixture
def reinforce():
    """REINFORCE registered as `algo: reinforce` for one test, then forgotten again."""
    import studio.form  # noqa: F401 - its FORM_FIELDS are built at import: here before, as in a studio without it

    register("reinforce", Reinforce)
    try:
        yield Reinforce
    finally:
        unregister("reinforce")


def _metrics(events: list[dict]) -> list[dict]:
    return [event for event in events if event["type"] == "metrics"]


def _plays_cartpole(path: Path) -> float:
    """Mean episode length of the saved model in Gymnasium's CartPole-v1 (random play: about 22)."""
    from trainer import load_model

    model, env, lengths = load_model(path), gymnasium.make("CartPole-v1"), []
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for length in range(1, 501):
            obs, _, terminated, truncated, _ = env.step(int(model.predict(obs, deterministic=True)[0]))
            if terminated or truncated:
                break
        lengths.append(length)
    return float(np.mean(lengths))


# ----------------------------------------------------------------------------- the four doors


def test_reinforce_learns_through_train_resumes_exactly_and_plays(reinforce, tmp_path):
    from trainer.config.defaults import shipped_config
    from trainer.run.checkpoint import read_checkpoint
    from trainer.run.events import read_events
    from trainer.run.loop import train

    config = shipped_config("cartpole", SETTINGS)  # the tuned PPO file, algo switched: PPO's keys drop out
    assert config.return_baseline is True and "clip_coef" not in config.to_dict()
    result = train(config, tmp_path / "run")
    metrics = _metrics(read_events(tmp_path / "run" / "metrics.jsonl"))
    assert metrics[-1]["recent_return_mean"] > 3 * RANDOM_CARTPOLE, [m["recent_return_mean"] for m in metrics]
    assert "value_loss" not in metrics[-1] and isinstance(metrics[-1]["policy_loss"], float)  # no critic
    payload = read_checkpoint(result.final_model)
    assert result.final_model.name == "cartpole_reinforce_final.pth" and payload["algo"] == "reinforce"
    assert _plays_cartpole(result.final_model) > 2 * RANDOM_CARTPOLE

    # Stopped after 3 updates and resumed: the same weights as 6 updates straight.
    short = shipped_config("cartpole", {**SETTINGS, "total_timesteps": 16 * 128 * 6, "checkpoint": {"interval": 1}})
    straight = train(short, tmp_path / "straight")
    updates = []
    train(
        short,
        tmp_path / "resumed",
        sinks=[lambda event: updates.append(event) if event["type"] == "metrics" else 0],
        should_stop=lambda: len(updates) >= 3,
    )
    checkpoint = read_checkpoint(tmp_path / "resumed" / "checkpoints" / f"ckpt_{16 * 128 * 3}.pth")
    state = checkpoint["algorithm_state"]  # REINFORCE's own: its optimiser, after 3 steps
    assert set(state) == {"optimizer"} and state["optimizer"]["step"] == 3
    resumed = train(short, tmp_path / "resumed", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), name


CLI_SCRIPT = """
import sys
sys.path[:0] = [{tests!r}]
from trainer.algos.registry import register
from test_algorithm_interface import Reinforce
register("reinforce", Reinforce)
from trainer.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_reinforce_trains_from_the_command_line(tmp_path):
    """`python -m trainer`'s main in a process whose script registered REINFORCE first."""
    script = tmp_path / "train_reinforce.py"
    script.write_text(CLI_SCRIPT.format(tests=str(REPO / "tests")))
    command = [
        sys.executable,
        str(script),
        "--config",
        "configs/cartpole.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
        *[arg for name, value in SETTINGS.items() for arg in ("--set", f"{name}={value}")],
    ]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    from trainer.run.events import read_events

    metrics = _metrics(read_events(tmp_path / "run" / "metrics.jsonl"))
    assert len(metrics) == 40 and metrics[-1]["recent_return_mean"] > 3 * RANDOM_CARTPOLE
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "algo: reinforce\nreturn_baseline: true\n" in saved and "clip_coef" not in saved
    assert _plays_cartpole(tmp_path / "run" / "cartpole_reinforce_final.pth") > 2 * RANDOM_CARTPOLE


def test_reinforce_trains_through_the_python_api(reinforce, tmp_path):
    from trainer import PPO
    from trainer.api import Model, api_class

    Trainer = api_class("reinforce")
    assert Trainer.__name__ == "Reinforce" and api_class("reinforce") is Trainer and Trainer.algo == "reinforce"
    settings = {name: value for name, value in SETTINGS.items() if name not in ("algo", "total_timesteps")}
    returns = []
    with Trainer("cartpole", **settings) as model:
        model.learn(
            total_timesteps=SETTINGS["total_timesteps"],
            callback=lambda metrics, _: returns.append(metrics["recent_return_mean"]),
        )
        assert returns[-1] > 3 * RANDOM_CARTPOLE, returns
        path = model.save(tmp_path / "reinforce.pth")
        obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32) * 0.5
        actions, _ = model.predict(obs, deterministic=True)
    with Model.load(path) as loaded:  # the file says which algorithm: its class
        assert type(loaded) is Trainer and loaded.num_timesteps == SETTINGS["total_timesteps"]
        np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], actions)
    with pytest.raises(ConfigError, match="trained with algo 'reinforce'; load it with Reinforce.load"):
        PPO.load(path)
    # the message names the algorithms that read the key (PPO's and whichever share it), not this one
    readers = r"ppo, a2c(, (?!reinforce)\w+)*"
    with pytest.raises(
        ConfigError, match=f"clip_coef is a key of algo {readers}, but this config trains algo reinforce"
    ):
        Trainer("cartpole", clip_coef=0.1)


STUDIO_SCRIPT = """
import json, sys, time
sys.path[:0] = [{tests!r}]
from trainer.algos.registry import register
from test_algorithm_interface import Reinforce, SETTINGS
register("reinforce", Reinforce)   # before the studio is built, as a studio that ships it would
from gradio_client import Client
from studio.form import FORM_FIELDS, visible_fields
from studio.runs import RunManager
from studio.ui import build_app
from trainer.cluster.launch import free_port

shown = {{algo: [f.key for f, on in zip(FORM_FIELDS, visible_fields(algo)) if on] for algo in ("ppo", "reinforce")}}
manager = RunManager({runs!r}, start_method="fork")   # trainers forked from here: REINFORCE is registered there
demo = build_app(manager)
demo.queue()
demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
try:
    client = Client(demo.local_url, verbose=False)
    summary = client.predict("cartpole", dict(SETTINGS), api_name="/start")
    deadline = time.time() + 240
    while summary["status"] not in ("finished", "failed", "stopped") and time.time() < deadline:
        time.sleep(0.5)
        summary = client.predict(summary["run_id"], api_name="/poll")
    print("RESULT", json.dumps({{"summary": summary, "shown": shown}}), flush=True)
finally:
    manager.shutdown()
    demo.close()
"""


def test_reinforce_trains_through_the_studio_start_api(tmp_path):
    script = tmp_path / "studio_reinforce.py"
    script.write_text(STUDIO_SCRIPT.format(tests=str(REPO / "tests"), runs=str(tmp_path / "runs")))
    env = {**os.environ, "PYTHONPATH": str(REPO), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=420, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    summary = result["summary"]
    assert summary["status"] == "finished", (summary["error"], summary["log_tail"])
    assert summary["final_model"] == "cartpole_reinforce_final.pth" and summary["updates"] == 40
    assert summary["last_return"] > 3 * RANDOM_CARTPOLE
    # The studio's form: PPO's keys while ppo is chosen, REINFORCE's own while it is.
    assert "clip_coef" in result["shown"]["ppo"] and "return_baseline" not in result["shown"]["ppo"]
    assert "return_baseline" in result["shown"]["reinforce"] and "clip_coef" not in result["shown"]["reinforce"]
    assert {"env_name", "num_envs", "learning_rate", "gamma"} <= set(result["shown"]["reinforce"])


# ----------------------------------------------------------------------------- around it


def test_the_config_knows_an_algorithm_by_its_registration(reinforce):
    from trainer.config.defaults import load_config
    from trainer.config.reference import reference_markdown
    from trainer.config.validation import config_from_dict

    assert "reinforce" in ALGORITHMS and "`return_baseline` | `true` |" in reference_markdown()
    assert "(algo `reinforce`)" in reference_markdown() and "(algo `ppo`, `a2c`)" in reference_markdown()
    config = load_config("configs/cartpole.yaml", ["algo=reinforce", "return_baseline=false"])
    assert config.return_baseline is False and list(config.to_dict())[5:7] == ["algo", "return_baseline"]
    choices = ", ".join(ALGORITHMS)  # the built-in ones, then the one registered here
    assert choices.endswith(", reinforce")
    with pytest.raises(ConfigError, match=f"must be one of {choices}, got 'reinforc3'.*reinforce \\(policy gradient"):
        config_from_dict({"algo": "reinforc3"})
    with pytest.raises(ConfigError, match="return_baseline is a key of algo reinforce, but this config trains algo "):
        config_from_dict({"return_baseline": True})
    with pytest.raises(AttributeError, match="'return_baseline' \\(a key of algo reinforce; this config trains ppo"):
        _ = config_from_dict({}).return_baseline


def test_registering_refuses_a_clash_and_a_non_algorithm(reinforce):
    @dataclass(frozen=True)
    class Clashing:
        gamma: float = key(0.9, "A shared key declared again.", Boolean(), ROLLOUT)

    with pytest.raises(ValueError, match="'gamma', a key every algorithm shares"):
        register("clash", Reinforce, keys=Clashing)
    with pytest.raises(ValueError, match="declares 'return_baseline' differently"):
        register(
            "clash",
            Reinforce,
            keys=dataclass(frozen=True)(
                type(
                    "Keys",
                    (),
                    {
                        "__annotations__": {"return_baseline": "bool"},
                        "return_baseline": key(False, "Another meaning.", Boolean(), ROLLOUT),
                    },
                )
            ),
        )
    with pytest.raises(TypeError, match="subclass of trainer.algos.base.Algorithm"):
        register("clash", object)
    with pytest.raises(ValueError, match="lower case"):
        register("Has Space", Reinforce)
    assert "clash" not in ALGORITHMS


def test_a_metric_the_registry_lacks_is_refused(reinforce, tmp_path):
    """When the algorithm registers, and (had it changed its names since) when the run is built."""
    from trainer.run.loop import train

    class Renamed(Reinforce):
        metric_names = ("policy_loss", "reinforce_loss")

    with pytest.raises(ValueError, match="'reinforce_loss'.*trainer/config/update_metrics.py"):
        register("renamed", Renamed)
    assert "renamed" not in ALGORITHMS
    register("renamed", Renamed, metric_names=("policy_loss",))  # registered saying less than it returns
    try:
        with pytest.raises(ValueError, match="'reinforce_loss'.*trainer/config/metrics.py"):
            train({**SETTINGS, "algo": "renamed", "total_timesteps": 2048}, tmp_path / "run")
    finally:
        unregister("renamed")


def test_the_form_shows_and_sends_the_chosen_algorithms_keys_only(reinforce):
    from studio.form import FORM_FIELDS, form_values, raw_config_from_form, tuned_config, visible_fields

    keys = [form_field.key for form_field in FORM_FIELDS]
    shown = dict(zip(keys, visible_fields("a2c")))
    assert shown["clip_coef"] and shown["update_epochs"] and shown["gamma"]  # a2c takes PPO's keys
    shown = dict(zip(keys, visible_fields("reinforce")))
    assert not shown["clip_coef"] and not shown["update_epochs"] and shown["gamma"] and shown["learning_rate"]
    values = form_values(tuned_config("cartpole"))
    values[keys.index("algo")] = "reinforce"
    raw = raw_config_from_form(values)
    assert raw["algo"] == "reinforce" and "clip_coef" not in raw and "gae_lambda" not in raw
