"""Small pygame helpers shared by the renderers: headless setup and surface -> RGB array."""
from __future__ import annotations

import os

import numpy as np

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

_FONTS: dict[int, object] = {}


def import_pygame():
    """Import pygame ready for off-screen drawing (no window needed, works headless)."""
    import pygame

    if not pygame.font.get_init():
        # First use, or someone called pygame.quit() (Gymnasium's envs do on close), which
        # invalidates every Font object: drawing with a stale one crashes the interpreter.
        pygame.font.init()
        _FONTS.clear()
    return pygame


def surface_to_array(surface) -> np.ndarray:
    """An H x W x 3 uint8 copy of a pygame surface."""
    pygame = import_pygame()
    return np.ascontiguousarray(np.transpose(pygame.surfarray.array3d(surface), (1, 0, 2)), dtype=np.uint8)


def font(size: int):
    """pygame's built-in default font at `size` pixels, cached."""
    pygame = import_pygame()
    if size not in _FONTS:
        _FONTS[size] = pygame.font.Font(None, size)
    return _FONTS[size]
