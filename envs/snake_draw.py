"""Snake drawn with pygame: a frame from a body, a food cell, a heading and a score."""

from __future__ import annotations

import numpy as np

from envs.rendering import font, import_pygame, surface_to_array
from envs.snake_board import COLUMN_STEP, ROW_STEP

GRASS_LIGHT = (170, 215, 81)
GRASS_DARK = (162, 209, 73)
BAR = (74, 117, 44)
SNAKE_BLUE = (78, 124, 246)
SNAKE_HEAD = (52, 90, 210)
APPLE_RED = (231, 71, 29)


def snake_cell_size(height: int, width: int) -> int:
    return max(8, min(32, 480 // max(height, width)))


def draw_snake(body, food_cell, heading: int, score: int, height: int, width: int) -> np.ndarray:
    """Draw one Snake frame from a body (head first), a food cell and a heading."""
    pygame = import_pygame()
    cell = snake_cell_size(height, width)
    bar = max(32, cell + 12)
    surface = pygame.Surface((width * cell, height * cell + bar))
    surface.fill(BAR)
    for row in range(height):
        for column in range(width):
            colour = GRASS_LIGHT if (row + column) % 2 == 0 else GRASS_DARK
            pygame.draw.rect(surface, colour, (column * cell, bar + row * cell, cell, cell))

    def centre(row: int, column: int) -> tuple[int, int]:
        return column * cell + cell // 2, bar + row * cell + cell // 2

    if food_cell is not None:
        x, y = centre(*food_cell)
        radius = max(3, cell * 2 // 5)
        pygame.draw.circle(surface, APPLE_RED, (x, y + 1), radius)
        pygame.draw.circle(surface, (255, 140, 110), (x - radius // 3, y - radius // 3), max(1, radius // 4))
        pygame.draw.line(surface, (110, 70, 30), (x, y - radius + 1), (x + 2, y - radius - 3), 2)
        pygame.draw.ellipse(surface, (60, 160, 40), (x + 2, y - radius - 4, max(4, cell // 4), max(3, cell // 7)))

    thickness = max(4, cell * 3 // 4)
    for segment, (row, column) in enumerate(body):
        colour = SNAKE_HEAD if segment == 0 else SNAKE_BLUE
        x, y = centre(row, column)
        pygame.draw.rect(
            surface,
            colour,
            (x - thickness // 2, y - thickness // 2, thickness, thickness),
            border_radius=thickness // 3,
        )
        if segment + 1 < len(body):  # fill the gap to the next segment
            next_x, next_y = centre(*body[segment + 1])
            left, top = min(x, next_x) - thickness // 2, min(y, next_y) - thickness // 2
            pygame.draw.rect(surface, SNAKE_BLUE, (left, top, abs(next_x - x) + thickness, abs(next_y - y) + thickness))
    if body:
        x, y = centre(*body[0])
        pygame.draw.rect(
            surface,
            SNAKE_HEAD,
            (x - thickness // 2, y - thickness // 2, thickness, thickness),
            border_radius=thickness // 3,
        )
        forward = (COLUMN_STEP[heading], ROW_STEP[heading])
        side = (-forward[1], forward[0])
        eye_radius = max(2, cell // 8)
        for sign in (-1, 1):
            eye_x = x + forward[0] * cell // 6 + sign * side[0] * cell // 5
            eye_y = y + forward[1] * cell // 6 + sign * side[1] * cell // 5
            pygame.draw.circle(surface, (255, 255, 255), (eye_x, eye_y), eye_radius + 1)
            pygame.draw.circle(surface, (20, 20, 40), (eye_x + forward[0], eye_y + forward[1]), max(1, eye_radius - 1))

    text = font(max(20, bar - 6)).render(f"Score {score}", True, (255, 255, 255))
    apple_x = 10 + max(4, bar // 3)
    pygame.draw.circle(surface, APPLE_RED, (apple_x, bar // 2), max(4, bar // 3))
    surface.blit(text, (apple_x + bar // 2 + 6, bar // 2 - text.get_height() // 2))
    return surface_to_array(surface)
