"""Python envs at full speed: our shared-memory worker pool (envs/pool.py) against Gymnasium's
and Stable-Baselines3's vector envs, raw and under PPO.

    python -m benchmarks.pool --repeat 3 --rollouts 4   # the README tables (35 minutes on 2 cores)
    python -m benchmarks.pool --quick                # what the goals compare, at 32 and 64 envs (2 minutes)
    python -m benchmarks.pool --envs 16 64 --seconds 1 --skip-ppo   # raw steps/s only

Two envs: Gymnasium's CartPole-v1 (a few microseconds of physics, so the vectoriser's own cost
shows) and `SlowEnv`, a pure-Python game that burns `STEP_CPU_SECONDS` of CPU per step (a
pygame game's order of magnitude, where worker processes matter). For SlowEnv the physical
limit is (cores this process may use) / (CPU seconds per step); the table gives each result
as a share of it. Raw steps/s use random actions; PPO end-to-end steps/s are `learn()` wall
time with the same settings for our PPO and SB3's (64x64 MLPs, CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

STEP_CPU_SECONDS = 300e-6
RESULTS = Path(__file__).resolve().parent / "results" / "pool.json"
QUICK_RESULTS = RESULTS.with_name("pool_quick.json")  # --quick never overwrites the full run's figures
RAW_KINDS = ("pool", "async_pool", "sync", "gym_sync", "gym_async", "sb3_subproc", "envpool")
PPO_KINDS = ("pool", "async_pool", "sync", "gym_async", "sb3_dummy", "sb3_subproc")
LABELS = {
    "pool": "ours: pool",
    "async_pool": "ours: async_pool",
    "sync": "ours: sync (in-process)",
    "gym_sync": "Gymnasium SyncVectorEnv",
    "gym_async": "Gymnasium AsyncVectorEnv",
    "sb3_subproc": "SB3 SubprocVecEnv",
    "sb3_dummy": "SB3 DummyVecEnv",
    "envpool": "EnvPool (C++)",
}
PPO_SETTINGS = {"num_steps": 64, "mini_batch_size": 512, "update_epochs": 2}
# The goals on a 2-core machine (README): (what, measure, env, vectoriser, peer or "limit", at least),
# each at GOAL_ENVS envs.
GOALS = (
    ("SlowEnv raw: share of the physical limit", "raw", "slow", "pool", "limit", 0.80),
    ("SlowEnv raw: x Gymnasium AsyncVectorEnv", "raw", "slow", "pool", "gym_async", 1.4),
    ("CartPole PPO end to end: x SB3 DummyVecEnv", "ppo", "cartpole", "pool", "sb3_dummy", 3.0),
)
GOAL_ENVS = (32, 64)
# `--quick`: only the measurements the goals compare (`goal_measurements`), at their sizes, with
# PPO runs long enough and rounds enough that the median outlasts this machine's speed swings.
QUICK = {"envs": list(GOAL_ENVS), "seconds": 2.0, "repeat": 7, "rollouts": 8}


class SlowEnv(gymnasium.Env):
    """A CartPole-shaped game whose every step burns STEP_CPU_SECONDS of CPU in pure Python
    (measured on the thread's CPU clock, so the cost holds however loaded the machine is)."""

    def __init__(self, step_cpu_seconds: float = STEP_CPU_SECONDS):
        self.cost = step_cpu_seconds
        self.observation_space = gymnasium.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self._state = np.zeros(4, dtype=np.float32)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = self.np_random.uniform(-0.05, 0.05, size=4).astype(np.float32)
        self._steps = 0
        return self._state.copy(), {}

    def step(self, action):
        end = time.thread_time() + self.cost
        x = 0.0
        while time.thread_time() < end:  # the game's Python work
            for i in range(50):
                x += i * 0.5
        self._steps += 1
        self._state[0] += 0.01 if action else -0.01
        terminated = abs(float(self._state[0])) > 0.5
        return self._state.copy(), 1.0, terminated, self._steps >= 200, {}


def env_fn(env: str) -> Callable[[], gymnasium.Env]:
    return functools.partial(gymnasium.make, "CartPole-v1") if env == "cartpole" else SlowEnv


def cores() -> int:
    from envs.cores import available_cores

    return available_cores()


# ----------------------------------------------------------------------------- raw steps/s


def _ours(env: str, num_envs: int, mode: str):
    from envs.gym_vec import GymVecEnv

    return GymVecEnv(env_fn(env), num_envs, seed=0, mode=mode, num_workers="auto")


def _raw_stepper(kind: str, env: str, num_envs: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one batched step of every env, close) for a vectoriser."""
    actions = np.random.default_rng(0).integers(0, 2, size=num_envs)
    if kind in ("pool", "sync"):
        vec = _ours(env, num_envs, kind)
        tensor_actions = torch.as_tensor(actions)
        return (lambda: vec.step(tensor_actions)), vec.close
    if kind == "async_pool":  # each half steps while the other is handed back (no policy here)
        vec = _ours(env, num_envs, "async_pool")
        halves = [torch.as_tensor(actions[group]) for group in vec.step_groups]
        vec.send(0, halves[0])
        vec.send(1, halves[1])

        def step_halves() -> None:
            for group in (0, 1):
                vec.recv(group)
                vec.send(group, halves[group])

        return step_halves, vec.close
    if kind in ("gym_sync", "gym_async"):
        vector = (gymnasium.vector.SyncVectorEnv if kind == "gym_sync" else gymnasium.vector.AsyncVectorEnv)(
            [env_fn(env)] * num_envs, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP
        )
        vector.reset(seed=0)
        return (lambda: vector.step(actions)), vector.close
    if kind in ("sb3_subproc", "sb3_dummy"):
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        vector = (SubprocVecEnv if kind == "sb3_subproc" else DummyVecEnv)([env_fn(env)] * num_envs)
        vector.reset()
        return (lambda: vector.step(actions)), vector.close
    if kind == "envpool":
        if env != "cartpole":
            raise NotImplementedError("EnvPool runs its own C++ games only")
        import envpool  # noqa: PLC0415  (optional: the reference where it installs)

        vector = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, num_threads=cores())
        vector.reset()
        return (lambda: vector.step(actions)), vector.close
    raise ValueError(f"unknown vectoriser {kind!r}")


ONE_PROCESS_PER_ENV = ("gym_async", "sb3_subproc")
_process_bytes: dict[tuple[str, str], int] = {}


def check_memory(kind: str, env: str, num_envs: int) -> None:
    """Refuse (MemoryError: the row is skipped) a vectoriser that starts one process per env
    when that many processes would not fit in the memory available: each process's own memory
    (USS) is measured once on a 2-env vector, not guessed. SB3's SubprocVecEnv starts its
    processes with forkserver, so each imports torch anew (0.15 GB measured); 256 of them swap a
    24 GB machine to a standstill."""
    if kind not in ONE_PROCESS_PER_ENV:
        return
    import psutil

    if (kind, env) not in _process_bytes:
        vector = _raw_stepper(kind, env, 2)
        try:
            children = psutil.Process().children(recursive=True)
            _process_bytes[kind, env] = max(child.memory_full_info().uss for child in children)
        finally:
            vector[1]()
    needed, available = num_envs * _process_bytes[kind, env], psutil.virtual_memory().available
    if needed > 0.7 * available:
        raise MemoryError(
            f"{num_envs} processes of {_process_bytes[kind, env] / 2**30:.2f} GB each need "
            f"{needed / 2**30:.1f} GB; {available / 2**30:.1f} GB are available"
        )


def raw_steps_per_second(kind: str, env: str, num_envs: int, seconds: float) -> float:
    check_memory(kind, env, num_envs)
    step, close = _raw_stepper(kind, env, num_envs)
    try:
        for _ in range(3):  # warm up: first episodes, page faults
            step()
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        close()


# ----------------------------------------------------------------------------- PPO end to end


def ppo_steps_per_second(kind: str, env: str, num_envs: int, rollouts: int) -> float:
    check_memory(kind, env, num_envs)
    total = num_envs * PPO_SETTINGS["num_steps"] * rollouts
    batch = num_envs * PPO_SETTINGS["num_steps"]
    minibatch = min(PPO_SETTINGS["mini_batch_size"], batch)
    if kind.startswith("sb3"):
        from stable_baselines3 import PPO as SB3PPO
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        vector = (SubprocVecEnv if kind == "sb3_subproc" else DummyVecEnv)([env_fn(env)] * num_envs)
        model = SB3PPO(
            "MlpPolicy",
            vector,
            n_steps=PPO_SETTINGS["num_steps"],
            batch_size=minibatch,
            n_epochs=PPO_SETTINGS["update_epochs"],
            policy_kwargs={"net_arch": [64, 64]},
            device="cpu",
            seed=0,
            verbose=0,
        )
        start = time.perf_counter()
        model.learn(total_timesteps=total)
        seconds = time.perf_counter() - start
        vector.close()
        return model.num_timesteps / seconds
    from envs.gym_vec import GymVecEnv
    from trainer import PPO

    mode = {"pool": "pool", "async_pool": "async_pool", "sync": "sync", "gym_async": "async"}[kind]
    vec = GymVecEnv(env_fn(env), num_envs, seed=0, mode=mode, num_workers="auto" if "pool" in mode else None)
    model = PPO(
        vec,
        num_steps=PPO_SETTINGS["num_steps"],
        mini_batch_size=minibatch,
        update_epochs=PPO_SETTINGS["update_epochs"],
        seed=0,
        gif_interval=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=total)
    seconds = time.perf_counter() - start
    steps = model.last_result.step
    vec.close()
    return steps / seconds


# ----------------------------------------------------------------------------- where the time goes

PHASE_KINDS = ("pool", "sync", "sb3_dummy")


@contextlib.contextmanager
def _timed(owner: Any, names: dict[str, str], seconds: dict[str, float]):
    """Wrap `owner`'s functions `names` (attribute -> phase) with timers adding into `seconds`."""
    originals = {name: getattr(owner, name) for name in names}
    own = {name for name in names if name in vars(owner)}  # the rest are inherited: restored by deleting

    def timer(name: str, phase: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return originals[name](*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - start

        return timed

    for name, phase in names.items():
        setattr(owner, name, timer(name, phase))
    try:
        yield
    finally:
        for name, original in originals.items():
            if name in own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def ppo_phases(kind: str, env: str, num_envs: int, rollouts: int) -> dict[str, float]:
    """PPO end to end as `ppo_steps_per_second` measures it, split into its two phases, in
    microseconds per vector step: collecting (env steps and the policy's actions) and learning
    (scoring the rollout, advantages and the update); with `steps_per_second`."""
    seconds = {"collect": 0.0, "learn": 0.0}
    if kind.startswith("sb3"):
        from stable_baselines3 import PPO as SB3PPO

        phases = _timed(SB3PPO, {"collect_rollouts": "collect", "train": "learn"}, seconds)
    else:
        import trainer.algos.ppo  # PPO.collect and .update call these through the module

        phases = _timed(
            trainer.algos.ppo, {"collect_rollout": "collect", "score_rollout": "learn", "ppo_update": "learn"}, seconds
        )
    with phases:
        rate = ppo_steps_per_second(kind, env, num_envs, rollouts)
    vector_steps = rollouts * PPO_SETTINGS["num_steps"]
    return {"steps_per_second": rate, **{phase: 1e6 * value / vector_steps for phase, value in seconds.items()}}


def phases_markdown(rows: list[dict]) -> str:
    """Per num_envs: each phase's microseconds per vector step, and SB3's time over ours."""
    lines = [
        "**Where the time goes (PPO, microseconds per vector step; medians of the rounds)**",
        "",
        "| env | num_envs | vectoriser | collect | learn | steps/s | SB3 / ours: collect | learn | total |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["env"], row["num_envs"], row["kind"]), []).append(row)

    def median(key: tuple, field: str) -> float:
        return float(np.median([row[field] for row in groups[key]]))

    for env, num_envs, kind in groups:
        key, peer = (env, num_envs, kind), (env, num_envs, "sb3_dummy")
        cells = [
            env,
            str(num_envs),
            LABELS[kind],
            f"{median(key, 'collect'):,.0f}",
            f"{median(key, 'learn'):,.0f}",
            f"{median(key, 'steps_per_second'):,.0f}",
        ]
        if peer in groups and kind != "sb3_dummy":
            cells += [f"{median(peer, field) / median(key, field):.2f}x" for field in ("collect", "learn")]
            cells.append(f"{median(key, 'steps_per_second') / median(peer, 'steps_per_second'):.2f}x")
        else:
            cells += ["-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the table


def step_cost(env: str) -> float:
    """CPU seconds one step of one copy costs (the physical limit's denominator): CPU time, not
    wall time, so other processes on the machine do not lower the limit."""
    single = env_fn(env)()
    single.reset(seed=0)
    count, start = 0, time.process_time()
    while time.process_time() - start < 0.5:
        _, _, terminated, truncated, _ = single.step(count % 2)
        if terminated or truncated:
            single.reset()
        count += 1
    return (time.process_time() - start) / count


def goal_measurements() -> set[tuple[str, str, str]]:
    """(measure, env, vectoriser) of every figure the goals read: each goal's and its peer's."""
    return {
        (measure, env, kind) for _, measure, env, ours, peer, _ in GOALS for kind in (ours, peer) if kind != "limit"
    }


def run(
    envs: list[str],
    counts: list[int],
    seconds: float,
    rollouts: int,
    skip_ppo: bool,
    repeat: int = 1,
    kinds: list[str] | None = None,
    only: set[tuple[str, str, str]] | None = None,
) -> dict[str, Any]:
    """Every measurement of the table (or those in `only`: (measure, env, vectoriser)); PPO ones
    `repeat` times in rounds (every vectoriser once per round, in turn), so that each round's
    ratios compare runs made moments apart."""
    results: dict[str, Any] = {
        "cores": cores(),
        "load_before": os.getloadavg()[0],
        "rows": [],
        "ppo_settings": PPO_SETTINGS,
        "step_cpu_seconds": STEP_CPU_SECONDS,
        "rollouts": rollouts,
        "repeat": repeat,
    }

    def wanted(chosen):
        return [kind for kind in chosen if kinds is None or kind in kinds]

    for env in envs:
        limit = cores() / step_cost(env)
        for num_envs in counts:
            plan = [("raw", kind, 0) for kind in wanted(RAW_KINDS)]
            if not skip_ppo:
                plan += [("ppo", kind, round_) for round_ in range(repeat) for kind in wanted(PPO_KINDS)]
            skipped = set()
            for measure, kind, round_ in plan:
                if (measure, kind) in skipped or (only is not None and (measure, env, kind) not in only):
                    continue
                try:
                    rate = (
                        raw_steps_per_second(kind, env, num_envs, seconds)
                        if measure == "raw"
                        else ppo_steps_per_second(kind, env, num_envs, rollouts)
                    )
                except (ImportError, NotImplementedError, MemoryError) as error:
                    print(f"  {measure} {env} {num_envs} {kind}: skipped ({error})", flush=True)
                    skipped.add((measure, kind))
                    continue
                row = {
                    "measure": measure,
                    "env": env,
                    "num_envs": num_envs,
                    "kind": kind,
                    "round": round_,
                    "steps_per_second": rate,
                    "limit": limit,
                    "load": os.getloadavg()[0],
                }
                results["rows"].append(row)
                print(
                    f"  {measure} {env} {num_envs:>4} {LABELS[kind]:<26} {rate:>10.0f} steps/s"
                    f"{f'  (round {round_ + 1})' if measure == 'ppo' and repeat > 1 else ''}",
                    flush=True,
                )
    results["load_after"] = os.getloadavg()[0]
    return results


def _spread(values: list[float], digits: int = 2, percent: bool = False) -> str:
    """median, and [min-max] when there are several."""

    def show(value: float) -> str:
        return f"{100 * value:.0f}%" if percent else f"{value:,.{digits}f}"

    median = float(np.median(values))
    return show(median) if len(values) == 1 else f"{show(median)} [{show(min(values))}-{show(max(values))}]"


def _ratios(rows: list[dict], measure: str, env: str, num_envs: int, kind: str, peer: str) -> list[float]:
    """`kind`'s steps/s over the peer's, one ratio per round (each against the peer measured in
    the same round); peer "limit": the share of the physical limit."""
    found = []
    for row in rows:
        if (row["measure"], row["env"], row["num_envs"], row["kind"]) != (measure, env, num_envs, kind):
            continue
        if peer == "limit":
            found.append(row["steps_per_second"] / row["limit"])
            continue
        peer_rate = next(
            (
                other["steps_per_second"]
                for other in rows
                if (other["measure"], other["env"], other["num_envs"], other["kind"]) == (measure, env, num_envs, peer)
                and other.get("round", 0) == row.get("round", 0)
            ),
            None,
        )
        if peer_rate:
            found.append(row["steps_per_second"] / peer_rate)
    return found


def goals_markdown(results: dict[str, Any]) -> str:
    """The issue's goals against this run's figures (medians of the rounds)."""
    lines = [
        "**The goals** (medians, [min-max] of the rounds)",
        "",
        "| goal | at least | " + " | ".join(f"{count} envs" for count in GOAL_ENVS) + " |",
        "|---|---|" + "---|" * len(GOAL_ENVS),
    ]
    for what, measure, env, kind, peer, least in GOALS:
        cells = [what, f"{100 * least:.0f}%" if peer == "limit" else f"{least}x"]
        for num_envs in GOAL_ENVS:
            found = _ratios(results["rows"], measure, env, num_envs, kind, peer)
            verdict = "met" if found and float(np.median(found)) >= least else "not met"
            cells.append(f"{_spread(found, percent=peer == 'limit')}: {verdict}" if found else "not measured")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def markdown(results: dict[str, Any]) -> str:
    """One table per measure: steps/s, x Gymnasium AsyncVectorEnv, x SB3 DummyVecEnv (PPO), and
    for SlowEnv % of the limit. With repeated rounds: the median of each, and [min-max] of the
    ratios, each taken against the peer of the same round."""
    lines = []
    rows = results["rows"]
    for measure, title in (("raw", "raw steps/s (random actions)"), ("ppo", "PPO end-to-end steps/s")):
        chosen = [row for row in rows if row["measure"] == measure]
        if not chosen:
            continue
        header = "| env | num_envs | vectoriser | steps/s | x AsyncVectorEnv |"
        header += " x SB3 DummyVecEnv |" if measure == "ppo" else ""
        lines += [f"**{title}**", "", header + " % of limit |", "|---" * (header.count("|")) + "|"]
        groups: dict[tuple, list[dict]] = {}
        for row in chosen:
            groups.setdefault((row["env"], row["num_envs"], row["kind"]), []).append(row)
        for (env, num_envs, kind), runs in groups.items():
            ratios = functools.partial(_ratios, rows, measure, env, num_envs, kind)  # (peer) -> per-round ratios
            cells = [env, str(num_envs), LABELS[kind], _spread([run_["steps_per_second"] for run_ in runs], 0)]
            cells += [_spread(found) if (found := ratios("gym_async")) else "-"]
            if measure == "ppo":
                cells += [_spread(found) if (found := ratios("sb3_dummy")) else "-"]
            cells += [_spread(ratios("limit"), percent=True) if env == "slow" else "-"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only what the goals compare (GOALS), with "
        + " ".join(
            f"--{name} {' '.join(map(str, value)) if isinstance(value, list) else value}"
            for name, value in QUICK.items()
        )
        + " (options given as well take precedence)",
    )
    parser.add_argument("--envs", nargs="+", type=int, help="num_envs values (default: 16 32 64 256)")
    parser.add_argument("--games", nargs="+", default=["cartpole", "slow"], choices=["cartpole", "slow"])
    parser.add_argument("--seconds", type=float, help="seconds per raw measurement (default: 2)")
    parser.add_argument("--rollouts", type=int, help="PPO rollouts per end-to-end measurement (default: 4)")
    parser.add_argument("--skip-ppo", action="store_true", help="raw steps/s only")
    parser.add_argument(
        "--repeat",
        type=int,
        help="rounds of PPO measurements (the table gives medians and [min-max] of the ratios; default: 1)",
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=sorted(set(RAW_KINDS) | set(PPO_KINDS)),
        help="only these vectorisers (default: all)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="instead: PPO's time per vector step split into collect / learn, ours (pool, sync) "
        "against SB3 (DummyVecEnv), `--repeat` rounds",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"JSON results file (default: {RESULTS.relative_to(RESULTS.parents[2])}; "
        f"with --quick {QUICK_RESULTS.name}, beside it)",
    )
    args = parser.parse_args(argv)
    defaults = (
        {**QUICK, "out": QUICK_RESULTS}
        if args.quick
        else {"envs": [16, 32, 64, 256], "seconds": 2.0, "repeat": 1, "rollouts": 4, "out": RESULTS}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    torch.set_num_threads(1)  # the learner's share; the cores are the workers'
    if args.phases:
        return phases_main(args)
    results = run(
        args.games,
        args.envs,
        args.seconds,
        args.rollouts,
        args.skip_ppo,
        args.repeat,
        args.kinds,
        goal_measurements() if args.quick else None,
    )
    from benchmarks.contender import write_json_atomic

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, results)
    print(f"\n{results['cores']} usable cores, load {results['load_before']:.1f} -> {results['load_after']:.1f}\n")
    print(markdown(results))
    print(goals_markdown(results))
    return 0


def phases_main(args: argparse.Namespace) -> int:
    rows = []
    for env in args.games:
        for num_envs in args.envs:
            for round_ in range(args.repeat):
                for kind in [kind for kind in PHASE_KINDS if args.kinds is None or kind in args.kinds]:
                    row = {
                        "env": env,
                        "num_envs": num_envs,
                        "kind": kind,
                        "round": round_,
                        **ppo_phases(kind, env, num_envs, args.rollouts),
                    }
                    rows.append(row)
                    print(
                        f"  phases {env} {num_envs:>4} {LABELS[kind]:<26} collect {row['collect']:>7,.0f} us  "
                        f"learn {row['learn']:>7,.0f} us  {row['steps_per_second']:>8,.0f} steps/s",
                        flush=True,
                    )
    from benchmarks.contender import write_json_atomic

    out = args.out.with_name(args.out.stem + "_phases.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, {"cores": cores(), "ppo_settings": PPO_SETTINGS, "rollouts": args.rollouts, "rows": rows})
    print()
    print(phases_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
