"""Reading YAML safely: the C loader when present, duplicate keys refused, one-line errors."""
from __future__ import annotations

import os
from typing import Any

import yaml

from .errors import HpclaunchError

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Base):  # type: ignore[misc, valid-type]
    pass


def _mapping(loader: Any, node: Any, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
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
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HpclaunchError(f"{where}: YAML syntax error: {problem} \u2014 fix the YAML at that line") from None


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
