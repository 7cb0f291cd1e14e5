"""Flappy Bird's `obs: lookahead` features: how high the bird will be when the next pipes reach
it, if it stops flapping now and if it flaps once now (envs/flappy_bird.py).

Where a Flappy Bird agent crashes (docs/benchmarks.md#why-flappy-bird-plateaus): after a high
gap comes a much lower one, and the bird leaves the high pipe too high, or still rising from a
flap, to fall into the low gap in the 15 steps between the pipes. The crash comes 20-35 steps
after the flap that caused it. These features show that future now: the bird falls fastest by not
flapping, so if it would still enter the next pipe above its gap while falling freely from here,
it is already lost; if it would after one flap now, that flap loses it.

For each of the next two pipes (the one the bird is in or meets next, and the one after it):
    where the bird's top edge will be, falling freely, on the step the pipe first overlaps it
    (the next step for the pipe around the bird), in the gap's own unit: 0 level with the gap's
    top edge, 1 where the bird's bottom edge is level with the gap's bottom edge
    ((height - gap top) / (gap size - bird height)); from 0 to 1 the bird fits through
    the same after flapping now
Below 0: even so the bird meets the pipe above its gap; above 1: below it. Clamped to [-2, 2];
the ceiling (a flap never takes the bird above y = 0) is left out: the gaps lie far below it.
The unit matters: in px / half the playfield (202 px), where the other 8 floats are measured, a
bird one px from a crash differs from a safe one by 0.005, and the policy's greedy games reached
1,000 pipes less than half as often (docs/benchmarks.md#flappy-bird-to-1000-pipes).
"""

from __future__ import annotations

import torch
from torch import Tensor

from envs.flappy_bird_screen import BIRD_WIDTH, BIRD_X

LOOKAHEAD_FEATURES = 4
FEATURE_LIMIT = 2.0


def steps_until_overlap(pipe_x: Tensor, pipe_speed: float) -> Tensor:
    """Steps until a pipe whose left edge is at `pipe_x` overlaps the bird: the first t >= 1 with
    pipe_x - t * speed < the bird's right edge (1 for a pipe around the bird already)."""
    ahead = pipe_x - (BIRD_X + BIRD_WIDTH)
    return torch.floor(ahead / pipe_speed).add_(1).clamp_(min=1)


def fall_distance(steps: Tensor, velocity: Tensor, max_fall_speed: float) -> Tensor:
    """px the bird moves down in `steps` steps without flapping from vertical speed `velocity`:
    the sum over i = 1..steps of min(velocity + i, max_fall_speed) (gravity 1 px/step^2)."""
    # The steps before the speed reaches its cap: i < max_fall_speed - velocity.
    speeding_up = (torch.ceil(max_fall_speed - velocity) - 1).clamp_(min=0).minimum(steps)
    return speeding_up * velocity + speeding_up * (speeding_up + 1) / 2 + (steps - speeding_up) * max_fall_speed


def lookahead_heights(
    bird_y: Tensor, velocity: Tensor, pipe_x: Tensor, pipe_speed: float, flap_velocity: float, max_fall_speed: float
) -> Tensor:
    """(2, 2, N) the bird's top edge on the step each of the next two pipes (left edges `pipe_x`,
    (2, N)) reaches it: [pipe, falling freely from here / after a flap now, env]."""
    steps = steps_until_overlap(pipe_x, pipe_speed).unsqueeze(1)
    # Falling: from here, every step. After a flap now: the flap's own step, then falling.
    steps = torch.cat((steps, steps - 1), dim=1)  # (2, 2, N)
    speed = torch.stack((velocity, torch.full_like(velocity, flap_velocity)))  # (2, N), broadcast over pipes
    start = torch.stack((bird_y, bird_y + flap_velocity))
    return fall_distance(steps, speed, max_fall_speed).add_(start)


def write_margins(out: Tensor, heights: Tensor, gap_tops: Tensor, gap_room: float) -> None:
    """Write the features into `out` (N, 4) from `lookahead_heights` (2, 2, N or 1) and the two
    pipes' gap tops (2, N); `gap_room`: the heights the bird's top edge can have in a gap (gap
    size - bird height), the features' unit."""
    margin = (heights - gap_tops.unsqueeze(1)).div_(gap_room).clamp_(-FEATURE_LIMIT, FEATURE_LIMIT)
    out.copy_(margin.reshape(4, -1).t())
