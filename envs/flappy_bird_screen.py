"""The classic Flappy Bird playfield, 288 x 512 px: its geometry (the screen, the ground, the bird
and the pipes), which the batched game (envs/flappy_bird.py) plays on, and its drawing with pygame."""

from __future__ import annotations

import numpy as np

from envs.rendering import font, import_pygame, surface_to_array

SCREEN_WIDTH = 288
SCREEN_HEIGHT = 512
GROUND_Y = 404  # int(512 * 0.79): the top of the ground strip
BIRD_X = 57  # int(288 * 0.2): left edge of the bird, which never moves horizontally
BIRD_WIDTH = 34
BIRD_HEIGHT = 24
PIPE_WIDTH = 52

SKY = (78, 192, 202)
PIPE_GREEN = (115, 191, 46)
PIPE_LIGHT = (155, 227, 89)
PIPE_DARK = (84, 56, 71)
GROUND_TOP = (101, 171, 43)
GROUND_SAND = (222, 216, 149)
GROUND_STRIPE = (208, 200, 128)
BIRD_YELLOW = (250, 204, 38)
BIRD_ORANGE = (245, 130, 30)
OUTLINE = (70, 50, 50)


def _draw_backdrop(pygame, surface) -> None:
    surface.fill(SKY)
    # Clouds, a pale city and bushes along the horizon, as in the original's background.
    for x in range(-20, SCREEN_WIDTH + 40, 46):
        pygame.draw.circle(surface, (233, 252, 217), (x, 330), 30)
    for index, x in enumerate(range(0, SCREEN_WIDTH, 24)):
        height = (28, 46, 36, 56, 30, 42)[index % 6]
        pygame.draw.rect(surface, (216, 243, 220), (x, 352 - height, 20, height + 20))
        for window_y in range(352 - height + 6, 352, 10):
            pygame.draw.rect(surface, (180, 226, 200), (x + 4, window_y, 4, 4))
            pygame.draw.rect(surface, (180, 226, 200), (x + 12, window_y, 4, 4))
    for x in range(-10, SCREEN_WIDTH + 30, 28):
        pygame.draw.circle(surface, (117, 213, 99), (x, 382), 20)
    pygame.draw.rect(surface, (117, 213, 99), (0, 380, SCREEN_WIDTH, GROUND_Y - 380))


def _draw_pipe(pygame, surface, x: float, top: float, bottom: float, cap_at_bottom: bool) -> None:
    if bottom <= top:
        return
    body = pygame.Rect(int(x) + 2, int(top), PIPE_WIDTH - 4, int(bottom - top))
    pygame.draw.rect(surface, PIPE_GREEN, body)
    pygame.draw.rect(surface, PIPE_LIGHT, (body.x + 6, body.y, 6, body.height))
    pygame.draw.rect(surface, PIPE_DARK, body, 2)
    cap_height = 24
    cap_y = bottom - cap_height if cap_at_bottom else top
    cap = pygame.Rect(int(x) - 2, int(cap_y), PIPE_WIDTH + 4, cap_height)
    pygame.draw.rect(surface, PIPE_GREEN, cap)
    pygame.draw.rect(surface, PIPE_LIGHT, (cap.x + 6, cap.y + 2, 6, cap.height - 4))
    pygame.draw.rect(surface, PIPE_DARK, cap, 2)


def _draw_bird(pygame, surface, bird_y: float, velocity: float) -> None:
    sprite = pygame.Surface((BIRD_WIDTH + 8, BIRD_HEIGHT + 8), pygame.SRCALPHA)
    body = pygame.Rect(4, 4, BIRD_WIDTH, BIRD_HEIGHT)
    pygame.draw.ellipse(sprite, BIRD_YELLOW, body)
    pygame.draw.ellipse(sprite, OUTLINE, body, 2)
    pygame.draw.ellipse(sprite, (252, 240, 200), (8, 10, 16, 10))  # wing
    pygame.draw.ellipse(sprite, OUTLINE, (8, 10, 16, 10), 1)
    pygame.draw.circle(sprite, (255, 255, 255), (29, 11), 6)  # eye
    pygame.draw.circle(sprite, OUTLINE, (29, 11), 6, 1)
    pygame.draw.circle(sprite, (0, 0, 0), (31, 11), 2)
    pygame.draw.polygon(sprite, BIRD_ORANGE, [(30, 18), (41, 19), (30, 24)])  # beak
    pygame.draw.polygon(sprite, OUTLINE, [(30, 18), (41, 19), (30, 24)], 1)
    tilt = max(-90.0, min(25.0, -velocity * 3.0))  # nose up when rising, down when falling
    rotated = pygame.transform.rotate(sprite, tilt)
    centre = (BIRD_X + BIRD_WIDTH / 2, bird_y + BIRD_HEIGHT / 2)
    surface.blit(rotated, rotated.get_rect(center=(int(centre[0]), int(centre[1]))))


def _draw_ground(pygame, surface, steps: int, speed: float) -> None:
    pygame.draw.rect(surface, GROUND_SAND, (0, GROUND_Y, SCREEN_WIDTH, SCREEN_HEIGHT - GROUND_Y))
    pygame.draw.rect(surface, GROUND_TOP, (0, GROUND_Y, SCREEN_WIDTH, 10))
    pygame.draw.line(surface, OUTLINE, (0, GROUND_Y), (SCREEN_WIDTH, GROUND_Y), 2)
    shift = int(steps * speed) % 24
    for x in range(-24 - shift, SCREEN_WIDTH + 24, 24):
        pygame.draw.polygon(
            surface,
            (140, 200, 60),
            [(x, GROUND_Y + 2), (x + 12, GROUND_Y + 2), (x + 6, GROUND_Y + 10), (x - 6, GROUND_Y + 10)],
        )
    pygame.draw.line(surface, GROUND_STRIPE, (0, GROUND_Y + 12), (SCREEN_WIDTH, GROUND_Y + 12), 2)


def _draw_score(pygame, surface, score: int) -> None:
    text = str(score)
    big = font(64)
    outline = big.render(text, True, (0, 0, 0))
    fill = big.render(text, True, (255, 255, 255))
    x = SCREEN_WIDTH // 2 - fill.get_width() // 2
    for dx, dy in ((-2, 0), (2, 0), (0, -2), (0, 2), (-2, -2), (2, 2), (-2, 2), (2, -2)):
        surface.blit(outline, (x + dx, 30 + dy))
    surface.blit(fill, (x, 30))


def draw_flappy_bird(
    bird_y: float,
    velocity: float,
    pipe_xs,
    gap_tops,
    gap_size: float,
    score: int,
    steps: int = 0,
    pipe_speed: float = 4.0,
) -> np.ndarray:
    """Draw one Flappy Bird frame (512 x 288 x 3 uint8) from a game state."""
    pygame = import_pygame()
    surface = pygame.Surface((SCREEN_WIDTH, SCREEN_HEIGHT))
    _draw_backdrop(pygame, surface)
    for x, gap_top in zip(pipe_xs, gap_tops):
        if x > SCREEN_WIDTH or x + PIPE_WIDTH < 0:
            continue
        _draw_pipe(pygame, surface, x, -30, gap_top, cap_at_bottom=True)
        _draw_pipe(pygame, surface, x, gap_top + gap_size, GROUND_Y + 2, cap_at_bottom=False)
    _draw_ground(pygame, surface, steps, pipe_speed)
    _draw_bird(pygame, surface, bird_y, velocity)
    _draw_score(pygame, surface, score)
    return surface_to_array(surface)
