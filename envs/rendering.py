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
    """An H x W x 3 uint8 copy of a pygame surface.

    Through `pygame.image.tobytes` (rows already in H x W order): about 4x faster than
    `surfarray.array3d` plus a transpose, and converting is most of a frame's cost in a GIF."""
    pygame = import_pygame()
    width, height = surface.get_size()
    pixels = np.frombuffer(pygame.image.tobytes(surface, "RGB"), dtype=np.uint8)
    return pixels.reshape(height, width, 3).copy()  # writable, like the array it replaces


def font(size: int):
    """pygame's built-in default font at `size` pixels, cached."""
    pygame = import_pygame()
    if size not in _FONTS:
        _FONTS[size] = pygame.font.Font(None, size)
    return _FONTS[size]
