"""YAML as data, bounded: the one reader for every config text (files, `--set`, the studio's box).

PyYAML's safe loader never runs code, but a few hundred bytes of aliases (`a: &a [*b, *b, ...]`)
expand to gigabytes, and deep nesting overflows the stack. Configs need neither, so this loader
refuses aliases, caps size and depth, and refuses a key given twice (PyYAML keeps the last silently).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_YAML_BYTES = 1_000_000  # a config is a few hundred bytes; this leaves room for comments
MAX_DEPTH = 20  # nested mappings / lists


class YamlError(ValueError):
    """Text that is not a YAML config this project reads (the message says why and where)."""


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str, source: str):
        super().__init__(stream)
        self.source = source
        self.depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise YamlError(
                f"{self.source}: line {mark.line + 1} uses a YAML alias (*name); configs do not need "
                "anchors or aliases, write the value out"
            )
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlError(
                f"{self.source} is nested more than {MAX_DEPTH} levels deep; a config is a flat "
                "mapping with a few small sections"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise YamlError(
                        f"{self.source}: line {key_node.start_mark.line + 1} gives {str(key)[:60]!r} "
                        "a second time; keep one of the two lines"
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str, source: str = "the YAML", mapping: bool = True) -> Any:
    """Parse `text`; with `mapping`, it must be a non-empty `key: value` mapping."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlError(f"{source} is too large ({len(text):_} characters; a config is at most {MAX_YAML_BYTES:_})")
    loader = None
    try:
        loader = _BoundedLoader(text, source)  # its reader checks every character: inside the try
        value = loader.get_single_data()
    except yaml.reader.ReaderError as error:
        raise YamlError(_unprintable(text, error.position, source)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise YamlError(
            f"{source} is not valid YAML{where}: {problem}. Check the indentation and that every line is `key: value`"
        ) from None
    except RecursionError:
        raise YamlError(f"{source} is nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not mapping:
        return value
    if value is None:
        raise YamlError(f"{source} is empty: write the keys to change, e.g. `env_name: cartpole`")
    if not isinstance(value, dict):
        raise YamlError(f"{source} must hold a mapping of `key: value` lines, got a {type(value).__name__}")
    return value


_CONTROL_NAMES = (
    "NUL",
    "SOH",
    "STX",
    "ETX",
    "EOT",
    "ENQ",
    "ACK",
    "BEL",
    "BS",
    "TAB",
    "LF",
    "VT",
    "FF",
    "CR",
    "SO",
    "SI",
    "DLE",
    "DC1",
    "DC2",
    "DC3",
    "DC4",
    "NAK",
    "SYN",
    "ETB",
    "CAN",
    "EM",
    "SUB",
    "ESC",
    "FS",
    "GS",
    "RS",
    "US",
)  # the ASCII names of 0x00 .. 0x1F


def _unprintable(text: str, position: int, source: str) -> str:
    """Where and which character PyYAML's reader refused (it gives only an offset and a code)."""
    position = min(max(position, 0), max(len(text) - 1, 0))
    code = ord(text[position]) if text else 0
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
        name = _CONTROL_NAMES[code] if code < 0x20 else "DEL" if code == 0x7F else "C1 control"
        what = f"a control character ({name}, 0x{code:02X})"
    else:
        what = f"a non-printable character (U+{code:04X})"
    return (
        f"{source} contains {what} at line {line} column {column}; YAML allows only printable "
        "characters (save the file as plain text, without binary data)"
    )


def load_yaml_file(path: str | Path) -> dict:
    """A config file: exists, is small, is UTF-8, and holds a mapping."""
    path = Path(path)
    if not path.is_file():
        raise YamlError(
            f"config file {str(path)[:200]!r} does not exist (give a path to a .yaml file, e.g. configs/cartpole.yaml)"
        )
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise YamlError(f"{path} is too large for a config ({size:_} bytes; at most {MAX_YAML_BYTES:_})")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlError(f"{path} is not UTF-8 text (byte {error.start} cannot be read); save it as UTF-8") from None
    return load_yaml_text(text, str(path))


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
