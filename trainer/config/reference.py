"""The config reference: every key with its default and meaning, in declaration order, as the
README's and docs/config.md's table (docs/build.py GENERATED_TABLES).

    python -c "from trainer.config.reference import reference_markdown; print(reference_markdown())"
"""

from __future__ import annotations

from typing import Any

from trainer.config.declaring import declared_keys


def config_reference() -> list[tuple[str, Any, str]]:
    """(key, default, meaning) for every key, in declaration order (the README table); an
    algorithm's own key says which algorithms take it."""
    return [
        (
            declared.name,
            declared.default,
            declared.help + (f" (algo {', '.join(f'`{name}`' for name in declared.algos)})" if declared.algos else ""),
        )
        for declared in declared_keys()
    ]


def reference_markdown() -> str:
    """The config reference as a Markdown table (key, default, meaning), for the README.

    (the command in this module's docstring)"""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key, default, meaning in config_reference():
        lines.append(f"| `{key}` | {markdown_value(default)} | {meaning.replace('|', '/')} |")
    return "\n".join(lines)


def markdown_value(value: Any) -> str:
    """A config value as the README's tables show it."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 10_000:
        return f"`{value:_}`"
    return f"`{value}`"
