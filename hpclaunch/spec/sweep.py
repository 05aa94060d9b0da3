"""Sweeps: parameter specs to points, and `{name}` placeholders filled per point."""
from __future__ import annotations

import itertools
import math
import re
import typing
from typing import Any, Optional

from dataclasses import fields
from dataclasses import is_dataclass as is_model
from hpclaunch.spec.job import Job, env_entry_problem
from hpclaunch.spec.train import Train
from hpclaunch.spec.typedload import Loader, SourceMap, _hints

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KINDS = ("range", "choice", "uniform", "loguniform")
# Bounds, checked before anything is enumerated: a sweep is one job array of at most MAX_POINTS
# tasks (validate.py refuses more); a range's ends are integers a shell and a program can read; and
# the text a sweep writes into the script (every task repeats the command with its point filled in)
# is at most MAX_SCRIPT_TEXT: a 1 MiB file must not render a GB script.
MAX_POINTS = 100_000
MAX_RANGE_END = 10 ** 15
MAX_SCRIPT_TEXT = 32 << 20
_SCALARS = (str, int, float, bool)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def check(sweep, command: list[str], env: dict[str, str], bad) -> None:
    """Problems with a sweep: malformed specs, unknown or unused placeholders."""
    names = list(sweep.parameters)
    reported = set()  # one problem per parameter: a refused one is not also "not used"

    def bad_param(name: str, message: str, value: Any, fix: str) -> None:
        reported.add(name)
        bad(f"sweep.parameters.{name}", message, value, fix)

    for name, spec in sweep.parameters.items():
        if "." in name:
            found = _job_key_problem(name, spec)
            if found:
                bad_param(name, *found)
                continue
        elif not _IDENT.fullmatch(name):
            bad_param(name, "is not a valid parameter name", name, "use letters, digits and _")
            continue
        elif name in _job_sections() and isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) not in _KINDS:
            # `resources: {nodes: [1, 2]}`: a job key written nested, not a placeholder's values
            sub = next(iter(spec))
            if name in JOB_KEY_PREFIXES:
                bad_param(name, "is a job section, not a parameter", name,
                          f"vary one key, written dotted: `{name}.{sub}: [...]`")
            else:
                bad_param(name, _REFUSED, f"{name}.{sub}", _REFUSED_FIX)
            continue
        problem = _spec_problem(spec, sweep.method)
        if problem:
            bad_param(name, problem[0], spec, problem[1])
            continue
        found = _train_value_problem(name.split(".", 1)[1], spec) if name.startswith("train.") else \
            _nul_problem(spec) if "." not in name else None
        if found:
            bad_param(name, *found)
    if not reported and sweep.parameters and sweep.method in ("grid", "random") and not sweep.study:
        size = script_text(sweep, command, env)
        if size > MAX_SCRIPT_TEXT:
            bad("sweep.parameters", f"its tasks would write about {size >> 20} MiB into the job script (each "
                "repeats the command with its point filled in); tasks", count(sweep),
                f"use fewer points or shorter values (at most {MAX_SCRIPT_TEXT >> 20} MiB)")
    if sweep.method == "random" and sweep.samples is None and not sweep.study:
        bad("sweep.samples", "random search needs a number of points", None, "add `samples: 20`")
    used = set()
    for i, arg in enumerate(command):
        for m in _PLACEHOLDER.finditer(arg):
            used.add(m.group(1))
            if m.group(1) not in sweep.parameters:
                bad(f"command[{i}]", f"uses {{{m.group(1)}}}, which is not a sweep parameter", arg,
                    f"add it under sweep.parameters or use one of: {', '.join(names)}")
    for key, value in env.items():
        for m in _PLACEHOLDER.finditer(value):
            used.add(m.group(1))
            if m.group(1) not in sweep.parameters:
                bad(f"env.{key}", f"uses {{{m.group(1)}}}, which is not a sweep parameter", value,
                    f"add it under sweep.parameters or use one of: {', '.join(names)}")
    for name in names:
        if name not in used and "." not in name and name not in reported:
            if name in _job_keys():  # `launcher: [mpi, srun]`: meant as the job key, not a placeholder
                bad(f"sweep.parameters.{name}", _REFUSED, name, _REFUSED_FIX)
            else:
                bad(f"sweep.parameters.{name}", "is not used: every task would run the same command", name,
                    f"put {{{name}}} in a command argument or an env value")


JOB_KEY_PREFIXES = ("env", "train")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFUSED = "only env.* and train.* job keys can vary within one job array"
_REFUSED_FIX = "sweep resources or launchers as separate jobs; use env.NAME, train.KEY or a {placeholder}"


def _job_key_problem(name: str, spec: Any) -> Optional[tuple[str, Any, str]]:
    """What is wrong with varying job key NAME (env.VAR or train.KEY), as (message, value, fix)."""
    prefix, key = name.split(".", 1)
    if prefix not in JOB_KEY_PREFIXES:
        return _REFUSED, name, _REFUSED_FIX
    if prefix == "env":  # the checks the env: section gets: its values reach the script too
        return env_entry_problem(key, _listed(spec))
    if key not in _train_keys():
        return "is not a train key", name, "use one of: " + ", ".join("train." + k for k in _train_keys())
    return None


def _nul_problem(spec: Any) -> Optional[tuple[str, Any, str]]:
    for value in _listed(spec):
        if isinstance(value, str) and "\x00" in value:
            return ("contains a NUL character, which no command argument or environment value can carry",
                    value, "remove it")
    return None


def _train_value_problem(key: str, spec: Any) -> Optional[tuple[str, Any, str]]:
    """A value of train.KEY that the train: section would refuse, as (message, value, fix): the
    rank reads the point as train: settings, so it must take what train: takes."""
    tp, md = _hints(Train)[key], next(f.metadata for f in fields(Train) if f.name == key)

    def refused(value: Any) -> Optional[tuple[str, str]]:
        loader = Loader(SourceMap(""))
        loader.convert(tp, value, key, md)
        return (loader.problems[0].message, loader.problems[0].fix) if loader.problems else None

    kind = next(iter(spec)) if isinstance(spec, dict) else None
    if kind in ("uniform", "loguniform"):
        found = refused(0.5)
        if found:
            return f"{kind} draws fractional numbers, and train.{key} refuses them: {found[0]}", spec, \
                "list the values, or use {range: [start, stop]} for integers"
    for value in train_samples(spec):
        found = refused(value)
        if found:
            return found[0], value, found[1]
    return None


def train_samples(spec: Any) -> list:
    """The values of a well-formed spec that bound what it gives: every listed value, a range's
    ends, a draw's bounds (a draw lies between them)."""
    kind = next(iter(spec)) if isinstance(spec, dict) else None
    if kind in ("uniform", "loguniform"):
        return list(spec[kind])
    if kind == "range":
        r = range(*spec["range"])
        return [r[0], r[-1]]
    return _listed(spec)


def _job_sections() -> list[str]:
    """Job keys that hold mappings (resources, slurm, env, train, ...)."""
    hints = _hints(Job)
    return [f.name for f in fields(Job) if is_model(hints[f.name]) or typing.get_origin(hints[f.name]) is dict]


def _job_keys() -> list[str]:
    return [f.name for f in fields(Job)]


def _train_keys() -> list[str]:
    return [f.name for f in fields(Train)]


def _listed(spec: Any) -> list:
    """The values a spec writes out as given (a list's or a choice's); ranges and draws are numbers."""
    if isinstance(spec, dict):
        spec = spec.get("choice")
    return spec if isinstance(spec, list) else []


def _spec_problem(spec: Any, method: str) -> Optional[tuple[str, str]]:
    if isinstance(spec, list):
        return _values_problem(spec) if spec else ("has no values", "list at least one value")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in _KINDS:
        return ("is not a parameter spec", "use a list, or one of {range: [0, 10]}, {choice: [...]}, "
                "{uniform: [a, b]}, {loguniform: [a, b]}")
    kind, args = next(iter(spec.items()))
    if kind == "range":
        if not (isinstance(args, list) and 1 <= len(args) <= 3 and all(isinstance(a, int) and not isinstance(a, bool)
                                                                          for a in args)):
            return ("range takes [stop], [start, stop] or [start, stop, step] integers", "e.g. {range: [0, 100]}")
        if any(abs(a) > MAX_RANGE_END for a in args):
            return ("range ends and step must be between -10**15 and 10**15", "e.g. {range: [0, 100]}")
        if len(args) == 3 and args[2] == 0:
            return ("range step is 0", "use a step of 1 or more (or below 0 to count down)")
        n = len(range(*args))
        if n == 0:
            return ("range is empty", "make stop greater than start")
        if n > MAX_POINTS:
            return (f"range has {n} values; a sweep has at most {MAX_POINTS} points",
                    "use a larger step or a shorter range")
        return None
    if kind == "choice":
        if not (isinstance(args, list) and args):
            return ("choice needs a non-empty list", "e.g. {choice: [a, b]}")
        return _values_problem(args)
    if method not in ("random", "tpe"):
        return (f"{kind} draws random values", "use method: random or tpe, or a list of values")
    ok = isinstance(args, list) and len(args) == 2 and all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                                            and abs(a) <= 1e300 and math.isfinite(a) for a in args) \
        and args[0] < args[1]
    if not ok:
        return (f"{kind} takes [low, high] with low < high", "e.g. {uniform: [0.0, 1.0]}")
    if kind == "loguniform" and args[0] <= 0:
        return ("loguniform needs low > 0", "e.g. {loguniform: [1.0e-5, 1.0e-1]}")
    return None


def _values_problem(values: list) -> Optional[tuple[str, str]]:
    """A listed value must be one word of text for a command line: a string, a number or a boolean."""
    if len(values) > MAX_POINTS:
        return (f"has {len(values)} values; a sweep has at most {MAX_POINTS} points", "list fewer values")
    for value in values:
        if not isinstance(value, _SCALARS):
            kind = "null" if value is None else type(value).__name__
            kind = {"list": "a list", "dict": "a mapping"}.get(kind, kind)
            return (f"has a value that is {kind}, not a string, number or true/false",
                    "list plain values; quote one that is text, e.g. '[1, 2]'")
    return None


def script_text(sweep, command: list[str], env: dict[str, str]) -> int:
    """About how many characters the sweep's tasks write into the script, without enumerating them:
    every task repeats the command and the varying env entries, its point filled in, and the point
    as JSON. Specs must be well-formed (_spec_problem)."""
    n = count(sweep)
    if n == 0 or n > MAX_POINTS:
        return 0
    uses: dict[str, int] = {name: 1 for name in sweep.parameters}  # the point's JSON
    base = 0
    for text in list(command) + [v for v in env.values() if _PLACEHOLDER.search(v)]:
        base += len(text) + 3
        for m in _PLACEHOLDER.finditer(text):
            base -= len(m.group(0))
            if m.group(1) in uses:
                uses[m.group(1)] += 1
    total = n * base
    for name, spec in sweep.parameters.items():
        lengths = _text_lengths(spec, sweep.method)
        if name.startswith("env."):
            uses[name] += 1
        per_task = (sum(lengths) * (n // len(lengths)) if sweep.method == "grid" else max(lengths) * n)
        total += uses[name] * per_task + n * (len(name) + 8)
    return total


def _text_lengths(spec: Any, method: str) -> list[int]:
    kind = next(iter(spec)) if isinstance(spec, dict) else None
    if kind in ("uniform", "loguniform"):
        return [24]  # a float's repr
    values = range(*spec["range"]) if kind == "range" else _listed(spec)
    return [len(_text(v)) for v in values]


def points(sweep) -> list[dict[str, str]]:
    names = list(sweep.parameters)
    if sweep.method == "grid":
        axes = [_values(sweep.parameters[n]) for n in names]
        return [{n: _text(v) for n, v in zip(names, combo)} for combo in itertools.product(*axes)]
    import random  # stdlib, but ~3 ms that only random search needs (every submit loads this module)
    rng = random.Random(sweep.seed)
    out = []
    for _ in range(sweep.samples or 0):
        out.append({n: _text(_draw(sweep.parameters[n], rng)) for n in names})
    return out


def _values(spec: Any) -> list:
    if isinstance(spec, list):
        return spec
    kind, args = next(iter(spec.items()))
    if kind == "range":
        return list(range(*args))
    return list(args)  # choice


def _draw(spec: Any, rng: Any) -> Any:
    if isinstance(spec, list):
        return rng.choice(spec)
    kind, args = next(iter(spec.items()))
    if kind == "range":
        return rng.choice(range(*args))
    if kind == "choice":
        return rng.choice(args)
    if kind == "uniform":
        return rng.uniform(args[0], args[1])
    return math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))


def fill(text: str, point: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: point.get(m.group(1), m.group(0)), text)


def count(sweep) -> int:
    """Points of a grid or random sweep; a study's trials (its grid's points when trials is unset)."""
    if sweep.study and sweep.trials is not None:
        return sweep.trials
    if sweep.method == "random":
        return sweep.samples or 0
    n = 1
    for spec in sweep.parameters.values():
        n *= _length(spec) if _spec_problem(spec, "grid") is None else 1
    return n


def _length(spec: Any) -> int:
    """How many values a well-formed grid spec has, without listing them."""
    if isinstance(spec, list):
        return len(spec)
    kind, args = next(iter(spec.items()))
    return len(range(*args)) if kind == "range" else len(args)
