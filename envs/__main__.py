"""Play the built-in games yourself, or list the environments.

    python -m envs play flappy_bird      # space (or up, or a click) flaps
    python -m envs play snake            # arrow keys steer
    python -m envs list                  # built-in names and aliases

Esc or closing the window quits; after a crash, space (or an arrow key) starts a new game.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

PLAYABLE = ("flappy_bird", "snake")
ARROW_HEADINGS = {"up": 0, "right": 1, "down": 2, "left": 3}  # snake's absolute actions
CONTROLS = {  # printed when a game starts; _key_action below is what the keys do
    "flappy_bird": "space, up, W or a click: flap",
    "snake": "arrow keys or W/A/S/D: steer",
}
QUIT_AND_RESTART = "esc or Q: quit; after a crash, any of the game's keys starts a new game"


@dataclass
class PlaySession:
    """What happened in a `play` session (the headless test reads it)."""

    game: str
    frames: int = 0
    actions: list[int] = field(default_factory=list)
    scores: list[int] = field(default_factory=list)  # one per finished game
    quit_by_user: bool = False


def _key_action(game: str, pygame, event, heading: int) -> int | None:
    """The action a key press asks for, or None if the key means nothing to this game."""
    if game == "flappy_bird":
        flap_keys = (pygame.K_SPACE, pygame.K_UP, pygame.K_w)
        if (event.type == pygame.KEYDOWN and event.key in flap_keys) or event.type == pygame.MOUSEBUTTONDOWN:
            return 1
        return None
    keys = {
        pygame.K_UP: "up",
        pygame.K_RIGHT: "right",
        pygame.K_DOWN: "down",
        pygame.K_LEFT: "left",
        pygame.K_w: "up",
        pygame.K_d: "right",
        pygame.K_s: "down",
        pygame.K_a: "left",
    }
    if event.type == pygame.KEYDOWN and event.key in keys:
        return ARROW_HEADINGS[keys[event.key]]
    return None


def play(
    game: str,
    fps: float | None = None,
    seed: int | None = None,
    max_frames: int | None = None,
    scale: float = 1.0,
    on_frame: Callable[[int], None] | None = None,
    **game_kwargs,
) -> PlaySession:
    """Open a window and play `game` ("flappy_bird" or "snake") with the keyboard.

    fps: steps per second (default: the game's own speed; 0 runs as fast as it can).
    max_frames: stop after this many frames (for scripted runs). on_frame(frame_index) is
    called before each frame's events are read, so a script can post key events.
    """
    from envs.registry import make_vec_env, resolve_env_name
    from envs.rendering import import_pygame

    game = resolve_env_name(game)
    if game not in PLAYABLE:
        raise SystemExit(f"'{game}' cannot be played by hand; choose one of: {', '.join(PLAYABLE)}")
    if game == "snake":
        game_kwargs.setdefault("action_mode", "absolute")
    env = make_vec_env(game, num_envs=1, seed=seed, **game_kwargs)
    env.auto_reset = False  # keep the crash on screen until the player restarts
    pygame = import_pygame()
    pygame.display.init()
    pygame.display.set_caption({"flappy_bird": "Flappy Bird", "snake": "Snake"}[game])
    frame = env.render(0)
    size = (int(frame.shape[1] * scale), int(frame.shape[0] * scale))
    window = pygame.display.set_mode(size)
    clock = pygame.time.Clock()
    fps = env.metadata["render_fps"] if fps is None else fps
    session = PlaySession(game=game)
    game_over = False
    heading = int(getattr(env, "heading", torch.zeros(1, dtype=torch.int64))[0])
    try:
        while max_frames is None or session.frames < max_frames:
            if on_frame is not None:
                on_frame(session.frames)
            action = 0 if game == "flappy_bird" else heading
            restart = False
            for event in pygame.event.get():
                if event.type == pygame.QUIT or (
                    event.type == pygame.KEYDOWN and event.key in (pygame.K_ESCAPE, pygame.K_q)
                ):
                    session.quit_by_user = True
                    return session
                wanted = _key_action(game, pygame, event, heading)
                if wanted is not None:
                    if game_over:
                        restart = True
                    else:
                        action = wanted
            if restart:
                env.reset()
                game_over = False
                heading = int(getattr(env, "heading", torch.zeros(1, dtype=torch.int64))[0])
            elif not game_over:
                _, _, terminated, truncated, _ = env.step(torch.tensor([action]))
                session.actions.append(action)
                if game == "snake":
                    heading = int(env.heading[0])
                if bool(terminated[0] | truncated[0]):
                    game_over = True
                    session.scores.append(int(env.game_score()[0]))
            _show(pygame, window, env.render(0), size, game_over, int(env.game_score()[0]))
            session.frames += 1
            if fps:
                clock.tick(fps)
    finally:
        pygame.display.quit()
        env.close()
    return session


def _show(pygame, window, frame: np.ndarray, size: tuple[int, int], game_over: bool, score: int) -> None:
    from envs.rendering import font

    surface = pygame.surfarray.make_surface(np.transpose(frame, (1, 0, 2)))
    if surface.get_size() != size:
        surface = pygame.transform.smoothscale(surface, size)
    window.blit(surface, (0, 0))
    if game_over:
        shade = pygame.Surface(size, pygame.SRCALPHA)
        shade.fill((0, 0, 0, 120))
        window.blit(shade, (0, 0))
        for line, (text, text_size) in enumerate(
            ((f"Game over: {score}", 44), ("space / arrow: play again", 24), ("esc: quit", 24))
        ):
            rendered = font(text_size).render(text, True, (255, 255, 255))
            window.blit(rendered, (size[0] // 2 - rendered.get_width() // 2, size[1] // 3 + line * 40))
    pygame.display.flip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs", description="RL Studio environments")
    commands = parser.add_subparsers(dest="command", required=True)
    play_parser = commands.add_parser("play", help="play flappy_bird or snake with the keyboard")
    play_parser.add_argument("game", help="flappy_bird or snake")
    play_parser.add_argument("--fps", type=float, default=None, help="steps per second (default: the game's speed)")
    play_parser.add_argument("--seed", type=int, default=None)
    play_parser.add_argument("--scale", type=float, default=1.0, help="window scale factor")
    play_parser.add_argument("--max-frames", type=int, default=None, help="stop after this many frames")
    commands.add_parser("list", help="list the built-in environments and their aliases")
    args = parser.parse_args(argv)
    if args.command == "list":
        from envs.registry import builtin_aliases, builtin_env_names

        aliases = builtin_aliases()
        for name in builtin_env_names():
            others = sorted(alias for alias, canonical in aliases.items() if canonical == name and alias != name)
            print(f"{name:12s} aliases: {', '.join(others)}")
        print("Any Gymnasium id (e.g. Acrobot-v1) or entry point 'package.module:Class' works too.")
        return 0
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from envs.errors import EnvError
    from envs.registry import resolve_env_name

    try:
        game = resolve_env_name(args.game)
        if game in CONTROLS:
            print(f"{game}: {CONTROLS[game]}; {QUIT_AND_RESTART}")
        session = play(args.game, fps=args.fps, seed=args.seed, max_frames=args.max_frames, scale=args.scale)
    except EnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finished = ", ".join(str(score) for score in session.scores) or "none finished"
    print(f"{session.game}: {session.frames} frames, scores: {finished}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
