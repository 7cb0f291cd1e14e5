"""benchmarks/flappy_deaths.py: it sorts crashes by what the bird hit and pipes by the drop before them."""

import torch

from benchmarks.flappy_deaths import BINS, FIRST, analyse, drop_bin, report
from envs.flappy_bird import HALF_FIELD

torch.set_num_threads(1)


def test_drop_bins_cover_every_drop_once():
    assert drop_bin(float("nan")) == FIRST
    assert [drop_bin(value) for value in (-142, -40, 0, 40, 80, 142)] == list(BINS[1:])


def test_a_bird_that_never_flaps_hits_the_ground_before_any_pipe():
    result = analyse(lambda obs: torch.zeros(len(obs), dtype=torch.long), envs=4, steps=60)
    assert set(result["kinds"]) == {"ground"} and sum(result["kinds"].values()) == 12  # a crash every 19 steps
    assert result["crashed"] == {FIRST: 12}, "no pipe passed: every crash is at a game's first pipe"


def test_a_bird_that_always_flaps_hits_the_first_pipe_above_its_gap_as_it_enters():
    result = analyse(lambda obs: torch.ones(len(obs), dtype=torch.long), envs=4, steps=200)
    assert set(result["kinds"]) == {"pipe above the gap, entering"}
    assert "crashes per 1,000 pipes" in report(result)


def test_a_gap_follower_passes_pipes_and_its_crashes_are_counted_by_drop():
    def follow(obs):  # flap when the bird's centre is 25 px above the next gap's bottom edge
        return (obs[:, 4] < 25 / HALF_FIELD).long()

    result = analyse(follow, envs=64, steps=1500)
    met, crashed = result["met"], result["crashed"]
    assert sum(met.values()) > 500 and all(crashed[name] <= met[name] for name in crashed)
    assert sum(crashed.values()) == sum(result["kinds"].values())
