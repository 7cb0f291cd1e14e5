"""The replay buffer (trainer/algos/replay.py) and its sum tree (trainer/algos/sum_tree.py),
checked against plain-Python computations:

- every sampled item's n-step return, next observation and discount equal a hand computation over
  a made-up sequence of steps of several envs, with terminations and truncations inside the
  window, in a buffer so small that it overwrites itself (truncations right at the wrap);
- only items whose whole window is stored are ever drawn (never the newest n_step - 1 rows, never
  an overwritten step);
- the sum tree draws in proportion to its priorities (a chi-square test), keeps its sums right
  when a batch sets one leaf twice, and never returns an empty leaf;
- prioritised replay: importance weights are (N P(i))^-beta / max, update_priorities moves the
  sampling distribution, new transitions enter with the largest priority seen;
- a buffer saved and loaded (as a checkpoint does) samples exactly what the original samples.
"""

from __future__ import annotations

import io
import math

import pytest
import torch

from trainer.algos.replay import PRIORITY_EPSILON, ReplayBuffer
from trainer.algos.sum_tree import SumTree

GAMMA = 0.9
NUM_ENVS = 3
ROWS = 5  # steps of each env the buffer holds: 16 steps below overwrite it three times

# The made-up episodes: step t of env e terminated / truncated. Truncations sit right before and
# right after the ring's wrap (rows 4 and 0: steps 4, 5, 9, 10, 14), two episodes of one step
# (env 1: steps 5 and 6), a termination right after a truncation and one in the newest rows.
STEPS = 16
TERMINATED = {(2, 0), (9, 0), (11, 1), (7, 2), (15, 2)}
TRUNCATED = {(4, 0), (14, 0), (5, 1), (6, 1), (10, 1), (9, 2)}


def reward(t: int, env: int) -> float:
    return 1.0 + 0.5 * t + 0.125 * env  # exact in float32, distinct per step


def observation(t: int, env: int) -> list[float]:
    """The observation step t acted on: it names the item (step, env)."""
    return [float(t), float(env)]


def final_observation(t: int, env: int) -> list[float]:
    """What step t led to (`info["final_obs"]`): the state to bootstrap from, even when the
    episode ended there."""
    return [t + 0.25, env + 100.0]


def add_step(buffer: ReplayBuffer, t: int) -> None:
    envs = range(NUM_ENVS)
    buffer.add(
        torch.tensor([observation(t, e) for e in envs]),
        torch.tensor([(t + e) % 2 for e in envs]),
        torch.tensor([reward(t, e) for e in envs]),
        torch.tensor([final_observation(t, e) for e in envs]),
        torch.tensor([(t, e) in TERMINATED for e in envs]),
        torch.tensor([(t, e) in TRUNCATED for e in envs]),
    )


def expected_window(t: int, env: int, n_step: int) -> tuple[float, list[float], float]:
    """(return, next observation, discount) of item (t, env), one step at a time."""
    total = 0.0
    for k in range(n_step):
        total += GAMMA**k * reward(t + k, env)
        if (t + k, env) in TERMINATED:
            return total, final_observation(t + k, env), 0.0
        if (t + k, env) in TRUNCATED:
            return total, final_observation(t + k, env), GAMMA ** (k + 1)
    return total, final_observation(t + n_step - 1, env), GAMMA**n_step


def expected_items(steps_added: int, n_step: int) -> set[tuple[int, int]]:
    """The (step, env) items a buffer of ROWS rows may draw after `steps_added` steps: stored (not
    yet overwritten) and with all n_step steps of their window stored."""
    oldest = max(0, steps_added - ROWS)
    return {(t, e) for t in range(oldest, steps_added - n_step + 1) for e in range(NUM_ENVS)}


def make_buffer(n_step: int, prioritized: bool, rows: int = ROWS, alpha: float = 0.6) -> ReplayBuffer:
    return ReplayBuffer(rows * NUM_ENVS, NUM_ENVS, (2,), (), torch.int64, "cpu", GAMMA, n_step, prioritized, alpha)


def check_batch(buffer: ReplayBuffer, steps_added: int, n_step: int, generator: torch.Generator) -> set:
    batch = buffer.sample(600, generator)
    seen = set()
    for i in range(600):
        t, env = int(batch.obs[i, 0]), int(batch.obs[i, 1])
        seen.add((t, env))
        expected_return, expected_next, expected_discount = expected_window(t, env, n_step)
        where = f"item (step {t}, env {env}) after {steps_added} steps, n_step {n_step}"
        assert float(batch.returns[i]) == pytest.approx(expected_return, rel=1e-6), where
        assert batch.next_obs[i].tolist() == expected_next, where
        assert float(batch.discounts[i]) == pytest.approx(expected_discount, rel=1e-6, abs=0), where
        assert int(batch.actions[i]) == (t + env) % 2, where
        assert int(batch.indices[i]) == (t % ROWS) * NUM_ENVS + env, where
    return seen


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_windows_match_a_hand_computation_through_the_wrap(n_step, prioritized):
    buffer = make_buffer(n_step, prioritized)
    generator = torch.Generator().manual_seed(0)
    for steps_added in range(1, STEPS + 1):
        add_step(buffer, steps_added - 1)
        expected = expected_items(steps_added, n_step)
        assert buffer.sampleable_rows * NUM_ENVS == len(expected)
        assert buffer.can_sample(len(expected)) and not buffer.can_sample(len(expected) + 1)
        if not expected:
            continue
        # 600 draws over at most 15 items: every drawable item is drawn, and nothing else.
        assert check_batch(buffer, steps_added, n_step, generator) == expected, f"after {steps_added} steps"


def test_the_hand_made_episodes_cover_the_cases_they_are_meant_to():
    """Guards the test above: windows of n_step 3 that stop at a truncation and at a termination,
    inside the window and at its first step, and truncations on both sides of the wrap."""
    cut_at = {"terminated": set(), "truncated": set()}
    for t in range(STEPS - 2):
        for env in range(NUM_ENVS):
            for k in range(3):
                if (t + k, env) in TERMINATED:
                    cut_at["terminated"].add(k)
                    break
                if (t + k, env) in TRUNCATED:
                    cut_at["truncated"].add(k)
                    break
    assert cut_at == {"terminated": {0, 1, 2}, "truncated": {0, 1, 2}}
    assert {t % ROWS for t, _ in TRUNCATED} >= {ROWS - 1, 0}


def test_state_dict_round_trip_samples_identically():
    buffer = make_buffer(3, prioritized=True)
    for t in range(STEPS - 3):
        add_step(buffer, t)
    buffer.update_priorities(torch.arange(9), torch.linspace(0.1, 3.0, 9))
    saved = io.BytesIO()
    torch.save(buffer.state_dict(), saved)  # as a checkpoint: opens with weights_only=True
    saved.seek(0)
    loaded = make_buffer(3, prioritized=True)
    loaded.load_state_dict(torch.load(saved, weights_only=True))

    for original in (True, False):  # sample, then go on adding to both and sample again
        batches = []
        for copy in (buffer, loaded):
            generator = torch.Generator().manual_seed(7)
            batches.append([copy.sample(64, generator, beta=0.5) for _ in range(3)])
        for first, second in zip(*batches, strict=True):
            for name in ("obs", "actions", "returns", "next_obs", "discounts", "weights", "indices"):
                assert torch.equal(getattr(first, name), getattr(second, name)), name
        if original:
            for t in range(STEPS - 3, STEPS):
                add_step(buffer, t)
                add_step(loaded, t)
    assert buffer.position == loaded.position and buffer.max_priority == loaded.max_priority


def test_a_saved_buffer_of_another_shape_is_refused_by_name():
    state = make_buffer(1, prioritized=False).state_dict()
    with pytest.raises(ValueError, match="buffer_size or num_envs changed"):
        make_buffer(1, prioritized=False, rows=ROWS + 1).load_state_dict(state)


# -- the sum tree -------------------------------------------------------------------------------

# Chi-square critical value at p = 0.001 for 29 degrees of freedom (30 drawable leaves), for when
# scipy is not installed.
CHI_SQUARE_29_DOF_P001 = 58.30


def chi_square(counts: list[int], probabilities: list[float]) -> tuple[float, float | None]:
    """The statistic and (with scipy) its p-value."""
    draws = sum(counts)
    statistic = sum((c - draws * p) ** 2 / (draws * p) for c, p in zip(counts, probabilities, strict=True))
    try:
        from scipy.stats import chi2
    except ImportError:
        return statistic, None
    return statistic, float(chi2.sf(statistic, len(counts) - 1))


def drawn_counts(priorities: torch.Tensor, draws: int, generator: torch.Generator) -> torch.Tensor:
    tree = SumTree(len(priorities))
    tree.set(torch.arange(len(priorities)), priorities)
    assert float(tree.total) == pytest.approx(float(priorities.sum()), rel=1e-12)
    leaves = tree.find(torch.rand(draws, generator=generator, dtype=torch.float64) * tree.total)
    return torch.bincount(leaves, minlength=len(priorities))


def test_sum_tree_draws_in_proportion_to_priority():
    capacity = 37  # not a power of two: the padding leaves must never be drawn either
    generator = torch.Generator().manual_seed(1)
    priorities = torch.rand(capacity, generator=generator, dtype=torch.float64) * 5 + 0.05
    priorities[[0, 5, 6, 20, 30, 31, 36]] = 0.0  # empty leaves, among them the first and last
    counts = drawn_counts(priorities, 200_000, generator)
    assert len(counts) == capacity, "a padding leaf was drawn"
    assert counts[priorities == 0].sum() == 0, "a leaf of priority 0 was drawn"
    drawable = (priorities > 0).nonzero().squeeze(1).tolist()
    assert len(drawable) == 30
    shares = [float(priorities[i] / priorities.sum()) for i in drawable]
    statistic, p_value = chi_square([int(counts[i]) for i in drawable], shares)
    if p_value is not None:
        assert p_value > 1e-3, f"chi-square {statistic:.1f}, p = {p_value:.2g}"
    assert statistic < CHI_SQUARE_29_DOF_P001, f"chi-square {statistic:.1f} with 29 degrees of freedom"

    # The same check fails for a distribution a little off: the largest share 10% too high.
    skewed = torch.tensor(shares)
    skewed[skewed.argmax()] *= 1.10
    statistic, _ = chi_square([int(counts[i]) for i in drawable], (skewed / skewed.sum()).tolist())
    assert statistic > 2 * CHI_SQUARE_29_DOF_P001


def assert_sums_consistent(tree: SumTree) -> None:
    inner = torch.arange(1, tree.leaves)
    assert torch.equal(tree.tree[inner], tree.tree[2 * inner] + tree.tree[2 * inner + 1])


def test_sum_tree_set_with_a_leaf_given_twice_keeps_the_sums_right():
    tree = SumTree(10)
    tree.set(torch.arange(10), torch.ones(10, dtype=torch.float64))
    tree.set(torch.tensor([2, 7, 2, 7, 2, 9]), torch.tensor([3.0, 0.5, 7.0, 0.25, 4.0, 2.0]))
    assert float(tree.get(torch.tensor([2]))) in (3.0, 7.0, 4.0)
    assert float(tree.get(torch.tensor([7]))) in (0.5, 0.25)
    assert_sums_consistent(tree)
    leaves = tree.get(torch.arange(10))
    assert float(tree.total) == float(leaves.sum()) and float(leaves[9]) == 2.0
    assert float(tree.tree[tree.leaves + 10 :].sum()) == 0.0  # padding untouched


@pytest.mark.parametrize("seed", range(5))
def test_sum_tree_find_never_returns_an_empty_leaf(seed):
    """Values right at the running sums' boundaries, at 0 and at (and beyond, by rounding) the
    total, on trees where most leaves are empty and priorities span many orders of magnitude."""
    generator = torch.Generator().manual_seed(seed)
    capacity = 50 + seed * 13
    priorities = torch.rand(capacity, generator=generator, dtype=torch.float64)
    priorities = priorities * 10.0 ** torch.randint(-12, 6, (capacity,), generator=generator)
    priorities[torch.rand(capacity, generator=generator) < 0.7] = 0.0
    priorities[-1] = 0.0  # the last real leaf empty: rounding past the total must not reach it
    priorities[int(torch.randint(capacity - 1, (1,), generator=generator))] = 1e-3  # at least one
    tree = SumTree(capacity)
    tree.set(torch.arange(capacity), priorities)
    assert_sums_consistent(tree)

    boundaries = torch.cumsum(priorities, 0)
    total = tree.total
    values = torch.cat(
        (
            boundaries,
            torch.nextafter(boundaries, torch.tensor(-math.inf, dtype=torch.float64)),
            torch.nextafter(boundaries, torch.tensor(math.inf, dtype=torch.float64)),
            torch.tensor([0.0, float(total)]),
            torch.nextafter(total, torch.tensor(math.inf, dtype=torch.float64)).reshape(1),
            torch.rand(5000, generator=generator, dtype=torch.float64) * total,
        )
    ).clamp(min=0.0)
    found = tree.find(values)
    assert int(found.max()) < capacity, "a padding leaf was returned"
    assert bool((priorities[found] > 0).all()), (
        f"empty leaves returned: {sorted(set(found[priorities[found] == 0].tolist()))}"
    )


# -- prioritised replay ---------------------------------------------------------------------------


def filled_prioritized_buffer(n_step: int = 3, rows: int = 8, alpha: float = 0.6) -> ReplayBuffer:
    buffer = make_buffer(n_step, prioritized=True, rows=rows, alpha=alpha)
    for t in range(rows + 3):  # wrapped
        add_step(buffer, t)
    return buffer


def drawable_indices(buffer: ReplayBuffer) -> list[int]:
    """The items of the rows whose windows are complete (oldest first), from the buffer's counters."""
    oldest = (buffer.position - buffer.rows_filled) % buffer.rows
    rows = [(oldest + k) % buffer.rows for k in range(buffer.sampleable_rows)]
    return [row * NUM_ENVS + env for row in rows for env in range(NUM_ENVS)]


def test_importance_weights_are_n_p_to_the_minus_beta_over_the_batch_max():
    alpha, beta = 0.6, 0.4
    buffer = filled_prioritized_buffer(alpha=alpha)
    items = drawable_indices(buffer)
    errors = {index: 0.05 + 0.3 * k for k, index in enumerate(items)}  # plain Python: item -> |TD error|
    buffer.update_priorities(torch.tensor(list(errors)), -torch.tensor(list(errors.values())))  # sign ignored
    priority = {index: (error + PRIORITY_EPSILON) ** alpha for index, error in errors.items()}
    total = sum(priority.values())

    batch = buffer.sample(32, torch.Generator().manual_seed(3), beta=beta)
    raw = [(len(items) * priority[int(index)] / total) ** -beta for index in batch.indices]
    expected = [w / max(raw) for w in raw]
    assert batch.weights.tolist() == pytest.approx(expected, rel=1e-5)
    assert min(expected) < 0.8 * max(expected)  # the weights differ: the check means something


def test_update_priorities_moves_the_sampling_distribution():
    alpha = 0.6
    buffer = filled_prioritized_buffer(alpha=alpha)
    items = drawable_indices(buffer)
    generator = torch.Generator().manual_seed(5)

    def frequencies() -> dict[int, float]:
        indices = torch.cat([buffer.sample(256, generator).indices for _ in range(200)])
        counts = torch.bincount(indices, minlength=buffer.rows * NUM_ENVS)
        return {index: float(counts[index]) / len(indices) for index in items}

    before = frequencies()
    assert all(share == pytest.approx(1 / len(items), rel=0.1) for share in before.values())  # all at max priority
    favourite, neglected = items[4], items[7]
    errors = {index: 1.0 for index in items} | {favourite: 20.0, neglected: 0.0}
    buffer.update_priorities(torch.tensor(list(errors)), torch.tensor(list(errors.values())))
    priority = {index: (error + PRIORITY_EPSILON) ** alpha for index, error in errors.items()}
    total = sum(priority.values())
    after = frequencies()
    for index in items:
        assert after[index] == pytest.approx(priority[index] / total, rel=0.1, abs=1e-4), index
    assert after[favourite] > 4 * before[favourite] and after[neglected] < 1e-3


@pytest.mark.parametrize("n_step", [1, 3])
def test_new_transitions_enter_with_the_largest_priority_seen(n_step):
    alpha = 0.6
    buffer = filled_prioritized_buffer(n_step=n_step, alpha=alpha)
    items = drawable_indices(buffer)
    buffer.update_priorities(torch.tensor(items[:3]), torch.tensor([0.5, 4.0, 2.0]))
    buffer.update_priorities(torch.tensor(items[3:6]), torch.tensor([0.1, 0.2, 0.3]))  # a lower max later
    largest = (4.0 + PRIORITY_EPSILON) ** alpha

    row = buffer.position
    add_step(buffer, 40)
    complete_row = (row - (n_step - 1)) % buffer.rows  # the row whose window this step completed
    complete = torch.arange(NUM_ENVS) + complete_row * NUM_ENVS
    assert buffer.tree.get(complete).tolist() == pytest.approx([largest] * NUM_ENVS, rel=1e-6)
    if n_step > 1:  # the newest rows wait, undrawable, until their windows are complete
        newest = torch.arange(NUM_ENVS) + row * NUM_ENVS
        assert buffer.tree.get(newest).tolist() == [0.0] * NUM_ENVS
    assert_sums_consistent(buffer.tree)
