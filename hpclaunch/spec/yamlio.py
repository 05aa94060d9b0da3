"""Reading YAML safely: the C loader when present, duplicate keys refused, one-line errors."""
from __future__ import annotations

import os
from typing import Any

import yaml

from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Base):  # type: ignore[misc, valid-type]
    def construct_document(self, node: Any) -> Any:
        self.root_node = node  # to name the field path of a bad key
        return super().construct_document(node)


class _KeyNotString(Exception):
    """A mapping key that is a list or a mapping: no Python dict can hold it."""

    def __init__(self, loader: Any, mapping: Any, key_node: Any):
        super().__init__()
        self.root, self.mapping, self.key_node = getattr(loader, "root_node", None), mapping, key_node


def _mapping(loader: Any, node: Any, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):  # `[1]: 2`, `{a: 1}: 2`, `? [a]`
            raise _KeyNotString(loader, node, key_node)
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml_file(path: str, what: str = "file") -> Any:
    """Parse a YAML file; any problem is one HpclaunchError line naming the file and place."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise HpclaunchError(f"{path}: no such {what} \u2014 check the path") from None
    except IsADirectoryError:
        raise HpclaunchError(f"{path}: is a directory, not a {what} \u2014 name a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HpclaunchError(f"{path}: cannot read the {what}: {e} \u2014 check its permissions and encoding (UTF-8)") from None
    return load_yaml_text(text, path)


def load_yaml_text(text: str, label: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _KeyNotString as e:
        mark = e.key_node.start_mark
        where = _path_to(e.root, e.mapping) if e.root is not None else None
        kind = "list" if isinstance(e.key_node, yaml.SequenceNode) else "mapping"
        key = _node_text(e.key_node)
        raise InvalidInput([Problem(
            f"{label}:{mark.line + 1}:{mark.column + 1}", where or "",
            f"keys must be strings, got a {kind} ({key})", has_value=False,
            fix=f"quote the key, e.g. '{key}': ..., or remove it")]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HpclaunchError(f"{where}: YAML syntax error: {problem} \u2014 fix the YAML at that line") from None


def _path_to(node: Any, target: Any, path: str = "") -> str | None:
    """The dotted field path of `target` within the document `node` ("" for the top level)."""
    if node is target:
        return path
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            name = _node_text(k)
            found = _path_to(v, target, f"{path}.{name}" if path else name)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found = _path_to(v, target, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _node_text(node: Any) -> str:
    """A node as short flow-style YAML, for messages."""
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_node_text(n) for n in node.value) + "]"
    if isinstance(node, yaml.MappingNode):
        return "{" + ", ".join(f"{_node_text(k)}: {_node_text(v)}" for k, v in node.value) + "}"
    return str(node.value)


def dump_yaml(data: Any) -> str:
    Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def display_path(path: str) -> str:
    """Paths in messages: relative to the working directory when that is shorter."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if len(rel) < len(path) and not rel.startswith("..") else path
