"""Batched Flappy Bird on the classic 288 x 512 playfield (its geometry and drawing:
envs/flappy_bird_screen.py).

The rules follow the well-known FlapPyBird clone: every step the bird falls a little faster
(gravity 1 px/step^2, at most 10 px/step); a flap sets its vertical speed to -9 px/step. Pipes
52 px wide scroll left at `pipe_speed` px/step, one every `pipe_spacing` px, each with a gap of
`gap_size` px at a random height. Touching a pipe or the ground ends the episode; the top of
the screen is a ceiling the bird bumps against. The score is the number of pipes passed.

Actions: 0 = do nothing, 1 = flap.

Observation (default `obs="vector"`, 8 floats, roughly in [-1, 1]):
    0  bird height (centre of the bird; -1 top of the screen, +1 the ground)
    1  bird vertical speed / 10 (negative = going up)
    2  next pipe: horizontal distance from the bird to the pipe's left edge / 288
    3  next pipe: gap top minus bird centre, / 202 (half the playfield height)
    4  next pipe: gap bottom minus bird centre, / 202
    5-7  the same for the pipe after it
`obs="lookahead"`: the 8 floats, then 4 more: where in the next two pipes' gaps the bird will be
when each reaches it (0 at the top edge, 1 at the bottom), falling freely from here and after a
flap now (envs/flappy_bird_lookahead.py).
`obs="pixels"`: `frame_stack` grayscale frames of `pixel_size` (default 2 x 84 x 84, values in
[0, 1]: sky 0, ground 0.3, pipes 0.6, bird 1), for a CNN.

Reward: `reward_alive` (+0.1) per step survived, `reward_pipe` (+10) per pipe passed and
`reward_death` (-5) on the step the bird crashes. The episode is truncated after `max_steps`.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import torch
from torch import Tensor

from envs.base import VecEnv
from envs.errors import EnvConfigError
from envs.flappy_bird_lookahead import LOOKAHEAD_FEATURES, lookahead_heights, write_margins
from envs.flappy_bird_screen import (
    BIRD_HEIGHT,
    BIRD_WIDTH,
    BIRD_X,
    GROUND_Y,
    PIPE_WIDTH,
    SCREEN_HEIGHT,
    SCREEN_WIDTH,
    draw_flappy_bird,
)
from envs.noise import UniformNoise
from envs.options import finite_number, number_between, positive_int, size_pair

GRAVITY = 1.0
MAX_FALL_SPEED = 10.0
HALF_FIELD = GROUND_Y / 2
OBS_WIDTHS = {"vector": 8, "lookahead": 8 + LOOKAHEAD_FEATURES}  # the observations that are floats
HARD_PIPE_SLACK = 0.15  # a hard pipe's gap lies within this share of the range from its far end
GROUND_SHADE = 0.3  # grayscale values of the pixel observations (sky 0, bird 1)
PIPE_SHADE = 0.6


class FlappyBirdVecEnv(VecEnv):
    """`num_envs` Flappy Birds stepped together on `device`.

    Keyword arguments (all optional):
        obs: "vector" (8 normalised floats, default), "lookahead" (12: the 8 and where the bird
            can be when the next pipes reach it) or "pixels" (grayscale frames for a CNN).
        pixel_size: frame size for obs="pixels", an int or [height, width] (default 84).
        frame_stack: frames per pixel observation, so speed is visible (default 2).
        gap_size: height of the gap between the pipes in px (default 100, as the original;
            bigger is easier).
        pipe_speed: px the pipes move left per step (default 4).
        pipe_spacing: horizontal distance between consecutive pipes in px (default 144).
        flap_velocity: vertical speed after a flap in px/step, negative is up (default -9).
        reward_alive: reward for every step the bird survives (default 0.1).
        reward_pipe: reward for each pipe passed (default 10.0).
        reward_death: reward on the step the bird crashes (default -5.0).
        max_steps: truncate an episode after this many steps (default 10000, about 277 pipes
            at the default speed, so a perfect agent's episodes still end).
        hard_pipes: share of spawned pipes whose gap lies at the far end of the range from the
            gap before it, within `HARD_PIPE_SLACK` of the range (default 0: the original's
            uniform gaps). A curriculum for the big drops: evaluation leaves it out.

    `score` (in the episode statistics) is the number of pipes passed.
    """

    name = "flappy_bird"
    score_unit = "pipes"
    training_only_options = ("hard_pipes",)
    metadata = {"render_fps": 30}

    def __init__(
        self,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        obs: str = "vector",
        pixel_size: int | tuple[int, int] = 84,
        frame_stack: int = 2,
        gap_size: float = 100,
        pipe_speed: float = 4,
        pipe_spacing: float = 144,
        flap_velocity: float = -9,
        reward_alive: float = 0.1,
        reward_pipe: float = 10.0,
        reward_death: float = -5.0,
        max_steps: int = 10000,
        hard_pipes: float = 0.0,
    ):
        super().__init__(num_envs, device, seed)
        if obs not in OBS_WIDTHS and obs != "pixels":
            raise EnvConfigError(f"obs must be 'vector', 'lookahead' or 'pixels', got {obs!r}")
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or not 1 <= frame_stack <= 8:
            raise EnvConfigError(f"frame_stack must be an integer from 1 to 8, got {frame_stack!r}")
        self.obs_mode = obs
        self.pixel_size = size_pair("pixel_size", pixel_size, 16, 512)
        self.frame_stack = frame_stack
        self.gap_size = number_between("gap_size", gap_size, BIRD_HEIGHT + 6, GROUND_Y * 0.6)
        self.gap_room = self.gap_size - BIRD_HEIGHT  # the heights of the bird's top edge that pass
        self.pipe_speed = number_between("pipe_speed", pipe_speed, 0.5, 20)
        self.pipe_spacing = number_between("pipe_spacing", pipe_spacing, 80 + self.pipe_speed, 600)
        self.flap_velocity = number_between("flap_velocity", -flap_velocity, 1, 30) * -1.0
        self.reward_alive = finite_number("reward_alive", reward_alive)
        self.reward_pipe = finite_number("reward_pipe", reward_pipe)
        self.reward_death = finite_number("reward_death", reward_death)
        self.max_steps = positive_int("max_steps", max_steps)
        self.hard_pipes = number_between("hard_pipes", hard_pipes, 0.0, 1.0)

        # Gap tops are drawn as the original does: int(uniform in [0, 0.6 * ground - gap)) + 0.2 * ground.
        self.gap_top_min = float(int(GROUND_Y * 0.2))
        self.gap_top_range = float(int(GROUND_Y * 0.6 - self.gap_size))
        # Enough pipes to cover the screen from the one leaving on the left to one beyond the right edge.
        self.num_pipes = math.ceil((SCREEN_WIDTH + PIPE_WIDTH) / self.pipe_spacing) + 1
        dev = self.device
        self._pipe_slots = torch.arange(self.num_pipes, device=dev, dtype=torch.float32) * self.pipe_spacing
        self._pipe_slot_column = self._pipe_slots.unsqueeze(1)  # (P, 1): pipe-major state, see `gap_tops`
        self._env_index = torch.arange(num_envs, device=dev)
        self._pipe_slots_int = torch.arange(self.num_pipes, device=dev)
        # A new game: the bird halfway up, still, and the first pipe entering on the right edge.
        self._start_y = torch.tensor(float((SCREEN_HEIGHT - BIRD_HEIGHT) // 2), device=dev)
        self._start_offset = torch.tensor(float(SCREEN_WIDTH), device=dev)
        self._zero = torch.zeros((), device=dev)
        if obs == "lookahead":  # a new game's bird: where it will be when pipes 0 and 1 reach it
            start_x = torch.stack((self._start_offset, self._start_offset + self.pipe_spacing)).view(2, 1)
            self._start_heights = self._lookahead_heights(self._start_y.view(1), self._zero.view(1), start_x)
        # A random 15-bit field times range / 2**15 is uniform * range exactly (scaling by a power
        # of two is exact), in one product.
        self._gap_field_scale = torch.tensor(self.gap_top_range / (1 << UniformNoise.FIELD_BITS), device=dev)

        if obs in OBS_WIDTHS:
            shape = (OBS_WIDTHS[obs],)
            self.single_observation_space = gymnasium.spaces.Box(-2.0, 2.0, shape=shape, dtype=np.float32)
        else:
            height, width = self.pixel_size
            self.single_observation_space = gymnasium.spaces.Box(
                0.0, 1.0, shape=(frame_stack, height, width), dtype=np.float32
            )
            # World coordinates of the centre of every observation pixel.
            self._pixel_rows = (torch.arange(height, device=dev) + 0.5) * (SCREEN_HEIGHT / height)
            self._pixel_cols = (torch.arange(width, device=dev) + 0.5) * (SCREEN_WIDTH / width)
            ground_rows = (self._pixel_rows >= GROUND_Y).to(torch.float32) * GROUND_SHADE
            self._ground_rows = ground_rows.expand(num_envs, 1, height)
            bird_cols = (self._pixel_cols >= BIRD_X) & (self._pixel_cols < BIRD_X + BIRD_WIDTH)
            self._bird_cols = bird_cols.to(torch.float32).expand(num_envs, 1, width)
            self._all_cols = torch.ones(num_envs, 1, width, device=dev)
            self._frames: Tensor | None = None
            self._start_frames: Tensor | None = None
        self.single_action_space = gymnasium.spaces.Discrete(2)

        self.bird_y = torch.zeros(num_envs, device=dev)  # top edge of the bird, px from the top
        self.bird_velocity = torch.zeros(num_envs, device=dev)
        self.pipe_offset = torch.zeros(num_envs, device=dev)  # left edge of pipe 0, px
        # Gap tops are kept pipe-major, (P, N): on a CPU, ops over a few long rows are several
        # times faster than over many rows of P values. `gap_tops` shows them as (N, P).
        self._gaps = torch.zeros(self.num_pipes, num_envs, device=dev)
        self.score = torch.zeros(num_envs, device=dev)
        self.episode_length = torch.zeros(num_envs, device=dev)
        self._noise = UniformNoise(num_envs, self.generator, dev)
        self._spawn_fields: Tensor | None = None
        self._steps_taken = 0
        # Vector obs: what `_restart` writes the observation of a new game into (columns 0-2 and
        # 5 are the same in every new game; `_reset_all` sets them). Scratch, not state: a tuple,
        # as checkpoints copy every tensor attribute.
        self._restart_scratch = (torch.empty(num_envs, OBS_WIDTHS[obs], device=dev),) if obs in OBS_WIDTHS else ()
        self.reset()

    # Game state -------------------------------------------------------------------------------

    @property
    def gap_tops(self) -> Tensor:
        """(N, P) top of the gap of every pipe, px (a view of the pipe-major state)."""
        return self._gaps.t()

    def _random_gap_tops(self, uniform: Tensor) -> Tensor:
        return torch.floor(uniform * self.gap_top_range).add_(self.gap_top_min)

    def _spawned_gap_tops(self, uniform: Tensor) -> Tensor:
        """(N,) gap tops of the pipes spawned this step, from one uniform number per env: as
        `_random_gap_tops`, or with `hard_pipes` (u < share) at the far end of the range from
        the last pipe's gap, u / share placing it there, and (u - share) / (1 - share) the rest."""
        if self.hard_pipes == 0.0:
            return self._random_gap_tops(uniform)
        share = self.hard_pipes
        hard = uniform < share
        easy_uniform = (uniform - share) / (1.0 - share) if share < 1.0 else uniform
        near_end = (uniform / share) * (HARD_PIPE_SLACK * self.gap_top_range)
        last_is_high = self._gaps[-1] < self.gap_top_min + self.gap_top_range / 2  # smaller y: higher
        far_end = torch.where(
            last_is_high, self.gap_top_min + self.gap_top_range - 1 - near_end, self.gap_top_min + near_end
        )
        return torch.where(hard, far_end.floor_(), self._random_gap_tops(easy_uniform))

    def _start_gaps(self) -> Tensor:
        """(P, N) gap tops of a new game in every env: as `_random_gap_tops`, from 15-bit fields
        (one 64-bit draw per 4 pipes), with no new tensor but the result."""
        tops = []
        for first in range(0, self.num_pipes, 4):
            fields = self._noise.draw_fields(min(4, self.num_pipes - first))
            tops.append(torch.mul(fields, self._gap_field_scale).floor_().add_(self.gap_top_min))
        return tops[0] if len(tops) == 1 else torch.cat(tops)

    def _reset_all(self) -> Tensor:
        self._gaps = self._start_gaps()
        self.bird_y = self._start_y.expand(self.num_envs).clone()
        self.bird_velocity = torch.zeros(self.num_envs, device=self.device)
        self.pipe_offset = self._start_offset.expand(self.num_envs).clone()
        self.score.zero_()
        self.episode_length.zero_()
        self._steps_taken = 0
        if self.obs_mode == "pixels":
            # Every game starts with the same picture (the pipes are still off-screen), the
            # first frame repeated.
            frame = self._pixel_frame(self.bird_y, self.pipe_offset, self._gaps)
            self._start_frames = frame[:1].unsqueeze(1).expand(-1, self.frame_stack, -1, -1).contiguous()
            self._frames = self._start_frames.expand(self.num_envs, -1, -1, -1).contiguous()
            return self._frames
        obs = self._vector_obs(self.bird_y, self.bird_velocity, self.pipe_offset, self._gaps)
        self._restart_scratch[0].copy_(obs)  # every env's new game: the columns all new games share
        return obs

    def _spawn_uniform(self) -> Tensor:
        """(N,) uniform numbers for the gap of a pipe spawned this step.

        One 64-bit draw per env gives four numbers, used over four steps: an env spawns at
        most one pipe per `pipe_spacing / pipe_speed` >= 4 steps, so it never reuses one.
        """
        field = self._steps_taken % 4
        if field == 0 or self._spawn_fields is None:
            self._spawn_fields = self._noise.draw(4)
        return self._spawn_fields[field]

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        flap = actions == 1
        velocity = torch.where(flap, self.flap_velocity, (self.bird_velocity + GRAVITY).clamp_(max=MAX_FALL_SPEED))
        bird_y = (self.bird_y + velocity).clamp_(min=0.0)  # the top of the screen is a ceiling
        hit_ground = bird_y >= GROUND_Y - BIRD_HEIGHT
        bird_y = bird_y.clamp_(max=GROUND_Y - BIRD_HEIGHT)

        old_pipe_x = self.pipe_offset + self._pipe_slot_column  # (P, N)
        pipe_offset = self.pipe_offset - self.pipe_speed
        pipe_x = old_pipe_x - self.pipe_speed
        # A pipe is passed when its centre crosses the bird's centre.
        crossing = BIRD_X + BIRD_WIDTH / 2 - PIPE_WIDTH / 2
        pipes_passed = ((old_pipe_x > crossing) & (pipe_x <= crossing)).sum(0, dtype=torch.float32)
        overlaps_x = (pipe_x < BIRD_X + BIRD_WIDTH) & (pipe_x > BIRD_X - PIPE_WIDTH)
        outside_gap = (bird_y < self._gaps) | (bird_y > self._gaps + self.gap_room)
        hit_pipe = (overlaps_x & outside_gap).any(0)
        terminated = hit_ground | hit_pipe

        # When pipe 0 has left the screen, every pipe moves down one slot and a new one spawns.
        shift = pipe_offset < -PIPE_WIDTH
        pipe_offset = torch.where(shift, pipe_offset + self.pipe_spacing, pipe_offset)
        shifted_gaps = torch.cat((self._gaps[1:], self._spawned_gap_tops(self._spawn_uniform()).unsqueeze(0)))
        self._gaps = torch.where(shift, shifted_gaps, self._gaps)
        self.bird_y, self.bird_velocity, self.pipe_offset = bird_y, velocity, pipe_offset
        self._steps_taken += 1

        score = self.score.add_(pipes_passed)
        self.episode_length.add_(1.0)
        truncated = self.episode_length >= self.max_steps
        reward = torch.where(terminated, self.reward_death, self.reward_alive).add_(pipes_passed * self.reward_pipe)
        return reward, score, terminated, truncated

    def _observe(self, done: Tensor) -> Tensor:
        if self.obs_mode != "pixels":
            return self._vector_obs(self.bird_y, self.bird_velocity, self.pipe_offset, self._gaps)
        # One new frame per env, pushed onto its stack.
        frame = self._pixel_frame(self.bird_y, self.pipe_offset, self._gaps)
        self._frames = torch.cat((self._frames[:, 1:], frame.unsqueeze(1)), dim=1)
        return self._frames

    def _restart(self, done: Tensor, final_obs: Tensor) -> Tensor:
        start_gaps = self._start_gaps()
        self.score.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0.0)
        self.bird_y = torch.where(done, self._start_y, self.bird_y)
        self.bird_velocity = torch.where(done, self._zero, self.bird_velocity)
        self.pipe_offset = torch.where(done, self._start_offset, self.pipe_offset)
        self._gaps = torch.where(done, start_gaps, self._gaps)
        if self.obs_mode != "pixels":
            # The others' observation has not changed: `final_obs`.
            return torch.where(done.unsqueeze(1), self._new_game_obs(start_gaps), final_obs)
        # Every game starts with the same picture: no frame to draw for the new ones.
        self._frames = torch.where(done.view(-1, 1, 1, 1), self._start_frames, final_obs)
        return self._frames

    # Observations -----------------------------------------------------------------------------

    def _new_game_obs(self, gaps: Tensor) -> Tensor:
        """(N, 8 or 12) `_vector_obs` of a new game in every env with gap tops `gaps` (P, N), in
        the same float32 arithmetic: the next pipes are pipes 0 and 1, and all but their gaps is
        the same in every new game (kept from reset). Scratch that the next call rewrites."""
        (obs,) = self._restart_scratch
        bird_centre = float((SCREEN_HEIGHT - BIRD_HEIGHT) // 2) + BIRD_HEIGHT / 2
        for ahead in range(2):
            torch.div(gaps[ahead] - bird_centre, HALF_FIELD, out=obs[:, 3 + 3 * ahead])
            torch.div(gaps[ahead] + self.gap_size - bird_centre, HALF_FIELD, out=obs[:, 4 + 3 * ahead])
        if self.obs_mode == "lookahead":  # the bird's heights are the same in every new game
            write_margins(obs[:, 8:], self._start_heights, gaps[:2], self.gap_room)
        return obs

    def _lookahead_heights(self, bird_y: Tensor, velocity: Tensor, pipe_x: Tensor) -> Tensor:
        return lookahead_heights(bird_y, velocity, pipe_x, self.pipe_speed, self.flap_velocity, MAX_FALL_SPEED)

    def _vector_obs(self, bird_y: Tensor, velocity: Tensor, pipe_offset: Tensor, gaps: Tensor) -> Tensor:
        """(N, 8 or 12) observations; `gaps` is pipe-major (P, N)."""
        pipe_x = pipe_offset + self._pipe_slot_column
        # The next pipe is the first whose right edge is still ahead of the bird's left edge.
        next_index = (pipe_x + PIPE_WIDTH <= BIRD_X).sum(0)
        bird_centre = bird_y + BIRD_HEIGHT / 2
        obs = torch.empty(self.num_envs, OBS_WIDTHS[self.obs_mode], device=self.device)
        torch.sub(bird_centre / HALF_FIELD, 1.0, out=obs[:, 0])
        torch.div(velocity, MAX_FALL_SPEED, out=obs[:, 1])
        flat_pipe_x, flat_gaps = pipe_x.view(-1), gaps.reshape(-1)
        pipes = []  # (left edge x, gap top) of the next two pipes
        for ahead in range(2):  # the next pipe and the one after it
            cell = (next_index + ahead).mul_(self.num_envs).add_(self._env_index)
            next_x = flat_pipe_x.index_select(0, cell)
            next_gap_top = flat_gaps.index_select(0, cell)
            torch.div(next_x - BIRD_X, SCREEN_WIDTH, out=obs[:, 2 + 3 * ahead])
            torch.div(next_gap_top - bird_centre, HALF_FIELD, out=obs[:, 3 + 3 * ahead])
            torch.div(next_gap_top + self.gap_size - bird_centre, HALF_FIELD, out=obs[:, 4 + 3 * ahead])
            pipes.append((next_x, next_gap_top))
        if self.obs_mode == "lookahead":
            heights = self._lookahead_heights(bird_y, velocity, torch.stack([x for x, _ in pipes]))
            write_margins(obs[:, 8:], heights, torch.stack([top for _, top in pipes]), self.gap_room)
        return obs

    def _pixel_frame(self, bird_y: Tensor, pipe_offset: Tensor, gaps: Tensor) -> Tensor:
        """(N, H, W) grayscale frames: sky 0, ground 0.3, pipes 0.6, bird 1.

        Every object is a rectangle, i.e. (its rows) x (its columns), so a frame is a sum of a
        few outer products: one batched matrix product for the whole batch. Pipes never
        overlap each other, the ground or the bird (except at a crash, clipped to 1).
        """
        rows, cols = self._pixel_rows, self._pixel_cols
        pipe_x = (pipe_offset.unsqueeze(1) + self._pipe_slots).unsqueeze(2)  # (N, P, 1)
        gap_tops = gaps.t()
        pipe_cols = ((cols >= pipe_x) & (cols < pipe_x + PIPE_WIDTH)).to(torch.float32)  # (N, P, W)
        gap_top = gap_tops.unsqueeze(2)
        pipe_rows = ((rows < gap_top) | (rows >= gap_top + self.gap_size)) & (rows < GROUND_Y)  # (N, P, H)
        bird_top = bird_y.view(-1, 1, 1)
        bird_rows = ((rows >= bird_top) & (rows < bird_top + BIRD_HEIGHT)).to(torch.float32)  # (N, 1, H)
        row_factors = torch.cat((pipe_rows.to(torch.float32).mul_(PIPE_SHADE), bird_rows, self._ground_rows), dim=1)
        column_factors = torch.cat((pipe_cols, self._bird_cols, self._all_cols), dim=1)
        return torch.bmm(row_factors.transpose(1, 2), column_factors).clamp_(max=1.0)

    def game_score(self) -> Tensor:
        return self.score

    # Rendering --------------------------------------------------------------------------------

    def render(self, index: int = 0) -> np.ndarray:
        """A 512 x 288 RGB frame of env `index`: sky, pipes, ground, bird and score."""
        index = self._check_render_index(index)
        values = (
            torch.cat(
                (
                    torch.stack(
                        (
                            self.bird_y[index],
                            self.bird_velocity[index],
                            self.pipe_offset[index],
                            self.score[index],
                            self.episode_length[index],
                        )
                    ),
                    self.gap_tops[index],
                )
            )
            .cpu()
            .numpy()
        )
        bird_y, velocity, pipe_offset, score, steps = values[:5]
        gap_tops = values[5:]
        pipe_xs = pipe_offset + np.arange(self.num_pipes) * self.pipe_spacing
        return draw_flappy_bird(
            float(bird_y), float(velocity), pipe_xs, gap_tops, self.gap_size, int(score), int(steps), self.pipe_speed
        )
