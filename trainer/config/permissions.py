"""Code named in a config: a custom env (`package.module:Class`) or wrappers are imports, and an
import runs code. A .pth, a run folder or a web form is data, so whatever reads one refuses the
code it names unless the user allowed custom code (the one check, used by the CLI, the studio,
evaluation and the Python API).
"""

from __future__ import annotations

from typing import Any

from trainer.config.checks import ConfigError

GYM_PREFIX = "gym:"


class CodePermissionError(ConfigError):
    """A config names Python code to import, and the user has not allowed custom code."""


def code_entry_points(config: Any) -> list[str]:
    """The `module:Class` entry points a config would import: a custom env and its wrappers."""
    raw = config.to_dict() if hasattr(config, "to_dict") else config
    env_name = str(raw.get("env_name") or raw.get("env") or raw.get("env_id") or "")
    inner = env_name[len(GYM_PREFIX) :] if env_name.startswith(GYM_PREFIX) else env_name
    wrappers = raw.get("wrappers") or []
    wrappers = [wrappers] if isinstance(wrappers, str) else list(wrappers) if isinstance(wrappers, list) else []
    return ([inner] if ":" in inner else []) + [str(item) for item in wrappers]


def require_code_permission(config: Any, allowed: bool, source: str, flag: str) -> None:
    """Refuse a config (from `source`) that names code to import unless the user allowed it with
    `flag`. Files are data: a .pth, a run folder or a web form never decide what code runs."""
    names = code_entry_points(config)
    if names and not allowed:
        shown = ", ".join(repr(name[:100]) for name in names[:3])
        raise CodePermissionError(
            f"{source} names Python code to import ({shown}); loading it would run that code, so it is refused "
            f"unless you allow custom envs with {flag}. Built-in games and registered Gymnasium ids always work"
        )
