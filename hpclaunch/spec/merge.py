"""Layered configuration: deep merge of plain dicts, remembering where each value came from."""
from __future__ import annotations

from typing import Any


def merge_into(base: dict, layer: dict, origins: dict[str, str], label: str, prefix: str = "") -> None:
    """Merge `layer` into `base` in place: mappings merge, everything else replaces."""
    for key, value in layer.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_into(base[key], value, origins, label, path)
        else:
            if isinstance(base.get(key), dict):  # only a mapping replaced has origins below it
                _forget_below(origins, path)
            base[key] = copy_plain(value)
            origins[path] = label


def copy_plain(value: Any) -> Any:
    """A deep copy of YAML data (mappings, lists, sets; every other value YAML gives is immutable).
    copy.deepcopy would do, but importing `copy` costs every command a few ms (issue 20)."""
    if isinstance(value, dict):
        return {k: copy_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_plain(v) for v in value]
    if isinstance(value, set):
        return set(value)
    return value


def _forget_below(origins: dict[str, str], path: str) -> None:
    prefix = path + "."
    for key in [k for k in origins if k.startswith(prefix)]:
        del origins[key]


def set_path(data: dict, dotted: str, value: Any) -> None:
    """Set a dotted path in nested dicts, creating mappings on the way."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value
