"""The metrics an algorithm's update computes, one family of the metric registry (`REGISTRY` in
trainer/config/metrics.py, which places them among the run's own): losses, off-policy and
actor-learner diagnostics. Each is an optional field of the metrics event, carried by the events
of the algorithms that declare it in their `metric_names` (checked when they register). A new
algorithm's metric is one `update_metric(...)` entry here. Stdlib only.
"""

from __future__ import annotations

from trainer.config.metric_kinds import Exported, Metric, diagnostic, update_metric

UPDATE_METRICS: tuple[Metric, ...] = (
    update_metric(
        "policy_loss",
        "Policy (actor) loss of the last update, mean over its minibatches.",
        "–",
        must_be_finite=True,
        charts=(diagnostic("Policy loss", 2),),
        csv=True,
        tensorboard="losses/policy_loss",
        prometheus=Exported("policy_loss", help="Policy (actor) loss of the last update; NaN when not finite."),
    ),
    update_metric(
        "value_loss",
        "Value (critic) loss of the last update, mean over its minibatches.",
        "–",
        must_be_finite=True,
        charts=(diagnostic("Value loss", 3),),
        csv=True,
        tensorboard="losses/value_loss",
        prometheus=Exported("value_loss", help="Value (critic) loss of the last update; NaN when not finite."),
    ),
    update_metric(
        "entropy",
        "Policy entropy in the last update: how random the actions still are.",
        "nats",
        must_be_finite=True,
        charts=(diagnostic("Entropy", 4),),
        csv=True,
        tensorboard="losses/entropy",
        prometheus=Exported("entropy", help="Policy entropy (nats) in the last update."),
    ),
    update_metric(
        "approx_kl",
        "Approximate KL divergence between the old and new policy.",
        "nats",
        must_be_finite=True,
        charts=(diagnostic("Approx. KL", 5),),
        csv=True,
        tensorboard="losses/approx_kl",
        prometheus=Exported("approx_kl"),
    ),
    update_metric(
        "clip_fraction",
        "Share of samples whose probability ratio was clipped in the last update.",
        "0-1",
        charts=(diagnostic("Clip fraction", 7),),
        csv=True,
        tensorboard="losses/clip_fraction",
        prometheus=Exported("clip_fraction_ratio", help="Share (0-1) of samples whose ratio was clipped."),
    ),
    update_metric(
        "explained_variance",
        "How much of the returns' variance the value function explains (1: all, 0 or less: no better than a constant).",
        "–",
        charts=(diagnostic("Explained variance", 1),),
        csv=True,
        tensorboard="losses/explained_variance",
    ),
    update_metric(
        "gradient_steps", "Gradient steps (minibatches) of the last update; fewer when target_kl stopped it.", "steps"
    ),
    # Off-policy diagnostics (DQN, SAC): in the events of the algorithms that return them
    update_metric(
        "q_value_mean",
        "Mean Q-value of the actions in the last update's sampled minibatches: what the critic expects to earn.",
        "return",
        must_be_finite=True,
        charts=(diagnostic("Q-values", 8),),
        csv=True,
        tensorboard="losses/q_value_mean",
        prometheus=Exported("q_value_mean"),
    ),
    update_metric(
        "td_error_mean",
        "Mean absolute TD error of the last update's sampled minibatches (what prioritised replay samples by).",
        "return",
        must_be_finite=True,
        charts=(diagnostic("TD error", 9),),
        csv=True,
        tensorboard="losses/td_error_mean",
        prometheus=Exported("td_error_mean"),
    ),
    update_metric(
        "epsilon",
        "DQN's exploration rate in the last update: the share of random actions.",
        "0-1",
        charts=(diagnostic("Epsilon", 10),),
        csv=True,
        tensorboard="charts/epsilon",
        prometheus=Exported("epsilon_ratio", help="DQN's exploration rate (0-1) in the last update."),
    ),
    update_metric(
        "alpha",
        "SAC's entropy coefficient in the last update (tuned automatically unless fixed).",
        "–",
        must_be_finite=True,
        charts=(diagnostic("Entropy coef. (alpha)", 11),),
        csv=True,
        tensorboard="losses/alpha",
        prometheus=Exported("sac_alpha"),
    ),
    update_metric(
        "buffer_size",
        "Transitions held by the replay buffer after the last update.",
        "transitions",
        charts=(diagnostic("Replay buffer", 12),),
        csv=True,
        tensorboard="charts/buffer_size",
        prometheus=Exported("replay_buffer_transitions"),
    ),
    # Actor-learner diagnostics (IMPALA, APPO): policy_lag is 0 when the learner plays its own env;
    # the other three come from the actors' experience source, null in a run without actors
    update_metric(
        "policy_lag",
        "Learner updates between the weights that played the last update's batch and that update (0: no actors).",
        "updates",
        charts=(diagnostic("Policy lag", 13),),
        csv=True,
        prometheus=Exported("policy_lag_updates"),
    ),
    update_metric(
        "queue_depth",
        "Actors' batches waiting for the learner after the last update.",
        "batches",
        csv=True,
        prometheus=Exported("queue_depth"),
    ),
    update_metric(
        "dropped_batches",
        "Actors' batches dropped so far because the learner's queue was full (the oldest goes).",
        "batches",
        prometheus=Exported("dropped_batches_total", "counter"),
    ),
    update_metric(
        "actors",
        "Actors connected to the learner after the last update.",
        "actors",
        csv=True,
        prometheus=Exported("actors"),
    ),
)
