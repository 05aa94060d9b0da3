"""Load plain YAML data into typed dataclasses, collecting every problem at once.

The dataclass is the schema (as submitit's signature is its schema): field names,
types, defaults and `meta()` annotations drive conversion, "did you mean" for
unknown keys, and the JSON Schema that `hpclaunch schema` prints. pydantic would do
the conversion too, but costs more import time than the whole renderer's budget
(see docs/benchmarks.md), and we want every error, each with a fix, not the first.
"""
from __future__ import annotations

import math
import typing
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union

from hpclaunch.common.errors import Problem
from dataclasses import MISSING, fields
from dataclasses import field as _field
from dataclasses import is_dataclass as is_model

Check = Callable[[Any], Optional[Tuple[str, str]]]  # value -> (message, fix) or None


# Every integer field without a maximum of its own holds at most what a signed 64-bit integer
# holds (SQLite, Slurm and C all stop there); every number field refuses NaN and infinities
# unless it says `nonfinite=True`: `.nan` passes every `minimum`/`maximum` comparison.
INT_LIMIT = 2 ** 63 - 1


def meta(help: str = "", *, minimum: float | None = None, maximum: float | None = None,
         check: Check | None = None, example: Any = None, nonfinite: bool = False,
         choices: Callable[[], Any] | None = None) -> dict:
    """A field's metadata. `choices`: the values a string field takes, for the schema's enum, when they
    are known only at run time (a registry: the launchers); `check` then refuses the others."""
    return {"help": help, "minimum": minimum, "maximum": maximum, "check": check,
            "example": example, "nonfinite": nonfinite, "choices": choices}


def pattern_check(pattern: "typing.Pattern[str]", message: str, fix: str) -> Check:
    """A field check: the whole value matches `pattern` (fullmatch: `$` would pass a final newline),
    else the problem (message, fix)."""
    return lambda value: None if pattern.fullmatch(value) else (message, fix)


def field(default: Any = MISSING, *, default_factory: Any = MISSING,
          **kwargs: Any) -> Any:
    """A model field with hpclaunch metadata (help text, bounds, a value check)."""
    return _field(default=default, default_factory=default_factory, metadata=meta(**kwargs))


class SourceMap:
    """Which file (or command-line override) each dotted path came from."""

    def __init__(self, default: str, origins: dict[str, str] | None = None):
        self.default = default
        self.origins = origins or {}

    def of(self, path: str) -> str:
        while path:
            if path in self.origins:
                return self.origins[path]
            # Parent first: `slurm.extra[0]` -> `slurm.extra` -> `slurm` (an item has its list's origin).
            path = path[: path.rindex("[")] if path.endswith("]") and "[" in path else path.rpartition(".")[0]
        return self.default


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str or tp is Scalar:
        return "a string"
    if tp is bool:
        return "true or false"
    if is_model(tp):
        return "a mapping"
    if origin in (list, List):
        return "a list"
    if origin in (dict, Dict):
        return "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args)
    return str(tp)


def wrong_kind(data: Any, cls: type, what: str) -> Optional[str]:
    """Why a whole file is not a `what` (a job file, a profile), or None. Names only the kind of
    content, never the content: the file may be any file the user (or a colleague's job file)
    pointed at, e.g. `-o profile=/etc/shadow`."""
    if not isinstance(data, dict):
        return f"is not a {what}: it holds {_yaml_kind(data)}, and a {what} is a mapping of keys"
    known = {f.name for f in fields(cls)}
    if data and not any(isinstance(k, str) and k in known for k in data):
        required = " and ".join(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
        return (f"is not a {what}: none of its {len(data)} top-level key(s) is a {what} key "
                f"(a {what} is a mapping with keys such as {required})")
    return None


def _yaml_kind(value: Any) -> str:
    """What a YAML value is, with its article: "null", "an integer", "a list"."""
    if value is None:
        return "null"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "mapping"}.get(type(value), type(value).__name__)
    return ("an " if kind[0] in "aeiou" else "a ") + kind


class Loader:
    """Converts one document; problems accumulate in `self.problems`."""

    def __init__(self, sources: SourceMap):
        self.sources = sources
        self.problems: list[Problem] = []
        self._nonfinite = False  # the field being converted allows NaN and infinities
        self._unknown = 0  # unknown keys so far

    def problem(self, path: str, message: str, value: Any = None, fix: str = "",
                has_value: bool = True) -> None:
        self.problems.append(Problem(self.sources.of(path), path, message, value, fix, has_value))

    def load(self, cls: type, data: Any, path: str = "") -> Any:
        if not isinstance(data, dict):
            self.problem(path or "(top level)", f"expected a mapping, got {_yaml_kind(data)}",
                         data, "write it as `key: value` lines", has_value=data is not None)
            return None
        known = {f.name: f for f in fields(cls)}
        hints = _hints(cls)
        for key in data:
            if key not in known:
                self._unknown_key(path, key, data[key], sorted(known))
        values = {}
        for name, f in known.items():
            sub = f"{path}.{name}" if path else name
            if name in data:
                values[name] = self.convert(hints[name], data[name], sub, f.metadata)
            elif f.default is MISSING and f.default_factory is MISSING:
                self.problem(sub, "is required", None, _required_fix(name, f.metadata),
                             has_value=False)
                values[name] = None
        return cls(**values)

    def _unknown_key(self, path: str, key: Any, value: Any, valid: list[str]) -> None:
        sub = f"{path}.{key}" if path else str(key)
        self._unknown += 1
        import difflib  # only on errors; not for thousands of them (a wrong file): ~70 us each
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6) if self._unknown <= 50 else None
        where = f"under {path}" if path else "at the top level"
        if close:
            fix = f"did you mean '{close[0]}'?"
        else:
            fix = f"valid keys {where}: " + ", ".join(valid)
        self.problem(sub, "unknown key", key, fix, has_value=False)

    def convert(self, tp: Any, value: Any, path: str, md: Any = None) -> Any:
        saved, self._nonfinite = self._nonfinite, bool(md and md.get("nonfinite"))
        try:
            out = self._convert(tp, value, path)
        finally:
            self._nonfinite = saved
        if out is not _BAD and md:
            self._check(md, out, path)
        return None if out is _BAD else out

    def _check(self, md: Any, value: Any, path: str) -> None:
        if value is None:
            return
        lo, hi = md.get("minimum"), md.get("maximum")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if lo is not None and value < lo:
                self.problem(path, f"must be at least {_num(lo)}", value,
                             f"use a value >= {_num(lo)}")
                return
            if hi is not None and value > hi:
                self.problem(path, f"must be at most {_num(hi)}", value,
                             f"use a value <= {_num(hi)}")
                return
        check = md.get("check")
        if check is not None:
            found = check(value)
            if found:
                message, fix = found
                self.problem(path, message, value, fix)

    def _convert(self, tp: Any, value: Any, path: str) -> Any:
        origin = typing.get_origin(tp)
        if origin is Union:
            args = typing.get_args(tp)
            if value is None and type(None) in args:
                return None
            non_none = [a for a in args if a is not type(None)]
            if len(non_none) == 1:
                return self._convert(non_none[0], value, path)
            for arg in non_none:  # scalar unions: first that fits exactly
                if _fits(arg, value):
                    return self._convert(arg, value, path)
            return self._wrong(tp, value, path)
        if is_model(tp):
            out = self.load(tp, value, path)  # reports anything but a mapping (null included)
            return hole(tp) if out is None else out
        if origin is Literal:
            choices = typing.get_args(tp)
            if value in choices and type(value) is type(choices[0]):
                return value
            if isinstance(value, (dict, list)):  # not a word at all: say what it is
                return self._wrong(tp, value, path)
            import difflib
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            fix = (f"did you mean '{close[0]}'? " if close else "") + \
                "choose one of: " + ", ".join(str(c) for c in choices)
            self.problem(path, "is not a valid choice", value, fix)
            return _BAD
        if origin in (list, List):
            if not isinstance(value, list):
                return self._wrong(tp, value, path)
            (item,) = typing.get_args(tp)
            items = [self._convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
            return _BAD if any(v is _BAD for v in items) else items
        if origin in (dict, Dict):
            if not isinstance(value, dict):
                return self._wrong(tp, value, path)
            _, item = typing.get_args(tp)
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    self.problem(f"{path}.{k}", "keys must be strings", k, "quote the key")
                    continue
                out[k] = self._convert(item, v, f"{path}.{k}")
            return _BAD if any(v is _BAD for v in out.values()) else out
        if tp is Any:
            return value
        if tp is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if isinstance(value, int) and abs(value) > _FLOAT_INT_LIMIT:
                    return self._out_of_range(value, path, f"use a number between -{_FLOAT_INT_LIMIT:.0e} "
                                              f"and {_FLOAT_INT_LIMIT:.0e}")
                out = float(value)
                if not math.isfinite(out) and not self._nonfinite:
                    self.problem(path, "must be a finite number", value, "write a number (not .nan or .inf)")
                    return _BAD
                return out
            return self._wrong(tp, value, path)
        if tp is int:
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, int) and not isinstance(value, bool):
                if abs(value) > INT_LIMIT:
                    return self._out_of_range(value, path, f"use a value between -{INT_LIMIT} and {INT_LIMIT}")
                return value
            return self._wrong(tp, value, path)
        if tp is bool or tp is str:
            if type(value) is tp:
                return value
            return self._wrong(tp, value, path)
        if tp is Scalar:  # strings for the shell: accept numbers, keep their text
            if isinstance(value, str):
                return value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            return self._wrong(tp, value, path, fix="quote it, e.g. \"1\"")
        raise TypeError(f"unsupported schema type {tp!r}")

    def _out_of_range(self, value: int, path: str, fix: str) -> Any:
        digits = int(value.bit_length() * 0.30103) + 1  # never str(): Python refuses it past 4,300 digits
        self.problem(path, f"is out of range (about {digits} digits)", None, fix, has_value=False)
        return _BAD

    def _wrong(self, tp: Any, value: Any, path: str, fix: str = "") -> Any:
        want = _type_name(tp)
        self.problem(path, f"expected {want}, got {_yaml_kind(value)}", value,
                     fix or f"write {want} here", has_value=value is not None)
        return _BAD


def hole(cls: type) -> Any:
    """A section that did not load (a scalar, a list or null where a mapping belongs), already
    reported: an instance whose every value is None, as a value that failed its own type check is.
    The tree keeps its shape, so rules across fields (validate.py) run on the rest of the document
    and skip what is unknown here, instead of tripping over a missing section."""
    hints = _hints(cls)
    return cls(**{f.name: hole(hints[f.name]) if is_model(hints[f.name]) else None for f in fields(cls)})


class Scalar(str):
    """Schema marker: a string that may be written as a YAML number (kept as its text)."""


def _fits(tp: Any, value: Any) -> bool:
    if tp is str:
        return isinstance(value, str)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is bool:
        return isinstance(value, bool)
    origin = typing.get_origin(tp)
    if origin in (list, List):
        return isinstance(value, list)
    if origin in (dict, Dict) or is_model(tp):
        return isinstance(value, dict)
    return False


_BAD = object()
_FLOAT_INT_LIMIT = 1e300  # an integer written for a number field: float() of more overflows


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _required_fix(name: str, md: Any) -> str:
    example = md.get("example") if md else None
    if example is not None:
        return f"add `{name}: {example}`"
    return f"add `{name}:`"


def to_plain(obj: Any) -> Any:
    """A dataclass tree back to plain dicts/lists (for job.yaml and JSON)."""
    if is_model(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def json_schema(cls: type, title: str = "") -> dict:
    """JSON Schema (draft 2020-12) of a dataclass tree, for editors."""
    schema = _schema_of(cls)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if title:
        schema["title"] = title
    return schema


def _schema_of(tp: Any, md: Any = None) -> dict:
    origin = typing.get_origin(tp)
    out: dict[str, Any]
    if is_model(tp):
        hints = _hints(tp)
        props, required = {}, []
        for f in fields(tp):
            props[f.name] = _schema_of(hints[f.name], f.metadata)
            if f.default is not MISSING and f.default is not None \
                    and not is_model(f.default):
                props[f.name]["default"] = f.default
            if f.default is MISSING and f.default_factory is MISSING:
                required.append(f.name)
        out = {"type": "object", "properties": props, "additionalProperties": False}
        if required:
            out["required"] = required
        if tp.__doc__:
            out["description"] = " ".join(tp.__doc__.split())
    elif origin is Union:
        args = typing.get_args(tp)
        out = {"anyOf": [_schema_of(a) for a in args]}
    elif origin is Literal:
        out = {"enum": list(typing.get_args(tp))}
    elif origin in (list, List):
        out = {"type": "array", "items": _schema_of(typing.get_args(tp)[0])}
    elif origin in (dict, Dict):
        out = {"type": "object", "additionalProperties": _schema_of(typing.get_args(tp)[1])}
    elif tp is type(None):
        out = {"type": "null"}
    elif tp is Scalar:
        out = {"type": ["string", "number"]}
    elif tp is Any:
        out = {}
    else:
        out = {"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[tp]}
    if md:
        if md.get("choices"):
            out["enum"] = list(md["choices"]())
        if md.get("help"):
            out["description"] = md["help"]
        if md.get("minimum") is not None:
            out["minimum"] = md["minimum"]
        if md.get("maximum") is not None:
            out["maximum"] = md["maximum"]
    return out
