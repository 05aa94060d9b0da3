"""Command-line overrides: `-o resources.nodes=4`, typed like the job file."""
from __future__ import annotations

import typing
from typing import Any

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.spec.job import Job
from dataclasses import fields
from dataclasses import is_dataclass as is_model
from hpclaunch.spec.typedload import Scalar, _hints
from hpclaunch.spec.yamlio import load_yaml_text

_STRINGY = (str, Scalar)


def parse_override(text: str) -> tuple[str, Any]:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # argv bytes that are not UTF-8 arrive as lone surrogates
        bad = text[e.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"{bad!r}"
        shown = text[:e.start].encode("utf-8", "replace").decode("utf-8")
        raise HpclaunchError(f"command line: -o {shown!r}...: not UTF-8 text ({byte} at character {e.start}) "
                             "\u2014 pass the value as UTF-8") from None
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise HpclaunchError(f"command line: -o {text!r}: expected KEY=VALUE \u2014 e.g. -o resources.nodes=4")
    target = field_type(key)
    if target is UNKNOWN:
        raise HpclaunchError(f"command line: -o {_esc(key)}: unknown key \u2014 {_esc(suggest(key))}")
    if _is_stringy(target):
        return key, raw  # names and env values stay exactly as typed (no YAML guessing: 007, yes, 1e3)
    try:
        value = load_yaml_text(raw, f"-o {key}") if raw.strip() else None
    except HpclaunchError:
        value = raw
    return key, value


UNKNOWN = object()


def _esc(text: str) -> str:
    """A piece of the command line in a one-line message: control characters escaped."""
    return text if text.isprintable() else repr(text)


def field_type(dotted: str) -> Any:
    tp: Any = Job
    for part in dotted.split("."):
        origin = typing.get_origin(tp)
        if origin is typing.Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
            origin = typing.get_origin(tp)
        if is_model(tp):
            hints = _hints(tp)
            if part not in hints:
                return UNKNOWN
            tp = hints[part]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return UNKNOWN
    return tp


def _is_stringy(tp: Any) -> bool:
    if tp in _STRINGY:
        return True
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return len(args) == 1 and args[0] in _STRINGY
    return False


def suggest(dotted: str) -> str:
    prefix, _, last = dotted.rpartition(".")
    tp = field_type(prefix) if prefix else Job
    if is_model(tp):
        names = [f.name for f in fields(tp)]
        import difflib
        close = difflib.get_close_matches(last, names, n=1)
        if close:
            return f"did you mean '{(prefix + '.') if prefix else ''}{close[0]}'?"
        return "valid keys here: " + ", ".join(names)
    return "check the key path against `hpclaunch schema`"
