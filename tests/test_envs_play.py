"""`python -m envs play`: the games respond to keys (driven headless with posted key events)."""

import os
import subprocess
import sys
from pathlib import Path

import pygame
import torch

from envs.__main__ import play

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]


def _post_key(key):
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key, mod=0, unicode="", scancode=0))


def test_flappy_bird_flaps_on_space_and_restarts_after_a_crash():
    flap_frames = {5, 15}

    def script(frame):
        if frame in flap_frames:
            _post_key(pygame.K_SPACE)
        if frame == 70:  # long after the crash: space starts a new game
            _post_key(pygame.K_SPACE)
        if frame == 75:
            _post_key(pygame.K_ESCAPE)

    session = play("flappy_bird", fps=0, seed=0, on_frame=script)
    assert session.quit_by_user and session.frames == 75
    flaps = [index for index, action in enumerate(session.actions) if action == 1]
    assert flaps == sorted(flap_frames), "exactly the posted spaces flapped"
    assert len(session.scores) == 1, "the bird crashed once; space restarted the game"
    assert session.actions[-4:] == [0, 0, 0, 0], "after the restart the game steps again"


def test_snake_follows_the_arrow_keys():
    from envs import make_vec_env

    start_heading = int(make_vec_env("snake", 1, seed=0, action_mode="absolute").heading[0])
    key_of_heading = [pygame.K_UP, pygame.K_RIGHT, pygame.K_DOWN, pygame.K_LEFT]
    first_turn = (start_heading + 1) % 4  # a right turn, then another
    second_turn = (first_turn + 1) % 4
    keys = {2: key_of_heading[first_turn], 4: key_of_heading[second_turn]}

    def script(frame):
        if frame in keys:
            _post_key(keys[frame])

    session = play("snake", fps=0, seed=0, max_frames=8, on_frame=script)
    assert session.frames == 8 and not session.quit_by_user
    assert session.actions[:2] == [start_heading] * 2, "without keys the snake goes straight on"
    assert session.actions[2:4] == [first_turn] * 2
    assert session.actions[4:] == [second_turn] * 4


def test_play_command_runs_headless():
    environment = dict(os.environ, SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy")
    result = subprocess.run(
        [sys.executable, "-m", "envs", "play", "snake", "--max-frames", "20", "--fps", "0"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "snake: 20 frames" in result.stdout
    assert "arrow keys" in result.stdout and "esc" in result.stdout  # the keys are said before play
    result = subprocess.run(
        [sys.executable, "-m", "envs", "play", "cartpole"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "flappy_bird, snake" in result.stderr
