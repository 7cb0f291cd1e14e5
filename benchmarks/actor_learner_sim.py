"""The simulated scaling table of `python -m benchmarks.actor_learner`: synchronous ranks against
a learner and N actors at 2 / 16 / 64 members, from per-batch costs measured on this machine.

Measured (per env, from the learner + 2 actors run of the same invocation):
- B: env steps per batch (num_envs x num_steps of one actor, or of one rank per update);
- A: an actor's CPU seconds per batch: the actors' CPU seconds (user + system) / the batches they
  sent (nodes.json), from the learner's first update to the end. CPU seconds, not wall seconds:
  what a member costs on a core of its own, which the other work on this machine does not inflate;
- L: the learner's CPU seconds per batch: the learner process's CPU seconds / its updates (one
  batch each), both counted from its first update (start-up left out);
- T: seconds to carry one batch: a 2-process gloo all-reduce of the batch's float32 body on
  loopback (trainer/cluster/actor_link.py's layout), the same library and wire the actors use;
- R: a 2-process gloo all-reduce of the network's gradient (one per gradient step, g per update).

The model (one core per member, no contention, every member's speed constant):
- synchronous, N ranks, each plays B then learns: steps/s = N B / (s_max A + L + g R(N)), with
  R(N) = R(2) x 2 (N - 1) / N (a ring all-reduce's bandwidth term) and s_max the slowest member's
  slow-down (5 for a member 5x slow);
- actor-learner, N actors: steps/s = B x min(sum_i 1 / (s_i A + T), 1 / (L + T)): the actors'
  batch rate, capped by the learner, which takes in one batch per L + T.
"""

from __future__ import annotations

import math

SIZES = (2, 16, 64)
SLOW_FACTOR = 5.0


def network(config: str, sets: list[str]) -> dict:
    """Parameters, gradient steps per update, batch steps and batch body floats of a config."""
    from trainer.cluster.actor_link import BatchLayout
    from trainer.config.defaults import load_config
    from trainer.nets.build import build_policy
    from trainer.run.setup import make_training_env, policy_spec

    loaded = load_config(config, ["device=cpu", *sets])
    env = make_training_env(loaded, 1, "cpu", 0)
    try:
        spec = policy_spec(loaded, env)
        policy = build_policy(spec)
    finally:
        env.close()
    layout = BatchLayout.for_run(loaded, spec)
    return {
        "parameters": sum(parameter.numel() for parameter in policy.parameters()),
        "gradient_steps": loaded.update_epochs * (loaded.batch_size // loaded.mini_batch_size),
        "batch_steps": loaded.num_envs * loaded.num_steps,
        "batch_floats": layout.body_size(0),
    }


def measure_costs(config: str, sets: list[str], appo_run: dict) -> dict:
    """B, A, L, T, R and g of one env (see the module's docstring), from an actor-learner run."""
    from benchmarks.cluster import all_reduce_seconds

    net = network(config, sets)
    batches, updates = appo_run.get("actor_batches"), appo_run.get("learner_updates")
    return {
        **net,
        "actor_seconds": appo_run["actors_cpu_seconds"] / batches if batches else None,
        "learner_seconds": appo_run["learner_cpu_seconds"] / updates if updates else None,
        "transfer_seconds": all_reduce_seconds(net["batch_floats"], 2, repeats=20),
        "all_reduce_seconds": all_reduce_seconds(net["parameters"], 2, repeats=50),
    }


def synchronous_rate(costs: dict, n: int, slowest: float) -> float:
    reduce = costs["all_reduce_seconds"] * 2 * (n - 1) / n
    update = slowest * costs["actor_seconds"] + costs["learner_seconds"] + costs["gradient_steps"] * reduce
    return n * costs["batch_steps"] / update


def actor_learner_rate(costs: dict, factors: list[float]) -> float:
    transfer = costs["transfer_seconds"]
    actors = sum(1.0 / (factor * costs["actor_seconds"] + transfer) for factor in factors)
    return costs["batch_steps"] * min(actors, 1.0 / (costs["learner_seconds"] + transfer))


def scaling_rows(costs: dict, sizes: tuple[int, ...] = SIZES) -> list[dict]:
    """Modelled steps/s of both modes at each size, all members equal and one 5x slow."""
    rows = []
    for n in sizes:
        for slow in (False, True):
            factors = [SLOW_FACTOR if slow and index == 0 else 1.0 for index in range(n)]
            sync = synchronous_rate(costs, n, max(factors))
            actor = actor_learner_rate(costs, factors)
            rows.append({"members": n, "one_slow": slow, "synchronous": sync, "actor_learner": actor})
    return rows


def learner_bound_from(costs: dict) -> int:
    """The fewest actors that keep the learner busy."""
    return math.ceil(
        (costs["actor_seconds"] + costs["transfer_seconds"]) / (costs["learner_seconds"] + costs["transfer_seconds"])
    )


def table(label: str, costs: dict) -> list[str]:
    """The markdown lines: the measured costs, the model, and the modelled table."""
    if not costs.get("actor_seconds") or not costs.get("learner_seconds"):
        return [f"{label}: no scaling table (the actor-learner run gave no actor or learner timings)"]
    lines = [
        f"{label}, measured per batch of B = {costs['batch_steps']:,} steps: actor A = "
        f"{costs['actor_seconds'] * 1e3:.1f} ms, learner L = {costs['learner_seconds'] * 1e3:.1f} ms (CPU), "
        f"transfer T = {costs['transfer_seconds'] * 1e3:.2f} ms ({costs['batch_floats']:,} floats), gradient "
        f"all-reduce R(2) = {costs['all_reduce_seconds'] * 1e3:.2f} ms x g = {costs['gradient_steps']} per update.",
        "Model (one core per member): synchronous N B / (s_max A + L + g R(2) 2(N-1)/N); actor-learner "
        "B min(sum_i 1/(s_i A + T), 1/(L + T)); s = 5 for the slowed member, 1 otherwise. "
        f"The learner is the bottleneck from {learner_bound_from(costs)} actors on.",
        "",
        "| members | synchronous steps/s | actor-learner steps/s | actor-learner / synchronous |",
        "|---|---|---|---|",
    ]
    for row in scaling_rows(costs):
        name = f"{row['members']}" + (", one 5x slow" if row["one_slow"] else "")
        lines.append(
            f"| {name} | {row['synchronous']:,.0f} | {row['actor_learner']:,.0f} | "
            f"{row['actor_learner'] / row['synchronous']:.2f}x |"
        )
    return lines
