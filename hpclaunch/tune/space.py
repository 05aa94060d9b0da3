"""A study's parameter specs (the job file's `sweep.parameters`, checked by spec/sweep.py and
spec/study.py) as Optuna's distributions, and a trial's values as the text a command receives.

The specs are the ones every sweep takes: a list or {choice: [...]} (categorical), {range:
[start, stop, step]} (integers, stop excluded as in Python), {uniform: [a, b]} and {loguniform:
[a, b]} (floats). A value reaches the command as the text a grid sweep would write for it, so a
study and a sweep of the same job run the same command lines.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List


def _text(value: Any) -> str:
    """As spec/sweep.py writes a point's value (true/false, a float's repr)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _choices(spec: Any) -> List[Any]:
    return spec if isinstance(spec, list) else list(spec["choice"])


def distributions(parameters: Dict[str, Any]) -> Dict[str, Any]:
    """{name: optuna distribution} for well-formed specs."""
    from optuna import distributions as d

    out: Dict[str, Any] = {}
    for name, spec in parameters.items():
        kind = next(iter(spec)) if isinstance(spec, dict) else "choice"
        if kind == "choice":
            out[name] = d.CategoricalDistribution(_choices(spec))
        elif kind == "range":
            r = range(*spec["range"])
            if r.step < 0:  # counting down: the same values, counted up
                r = r[::-1]
            out[name] = d.IntDistribution(r.start, r[-1], step=r.step)
        else:
            low, high = (float(a) for a in spec[kind])
            out[name] = d.FloatDistribution(low, high, log=kind == "loguniform")
    return out


def grid(parameters: Dict[str, Any]) -> Dict[str, List[Any]]:
    """Every value of each (finite) spec, for Optuna's GridSampler."""
    out: Dict[str, List[Any]] = {}
    for name, spec in parameters.items():
        if isinstance(spec, dict) and "range" in spec:
            out[name] = list(range(*spec["range"]))
        else:
            out[name] = _choices(spec)
    return out


def grid_points(parameters: Dict[str, Any], limit: int) -> List[Dict[str, Any]]:
    """The grid's first `limit` points, in the order a grid sweep runs them."""
    import itertools

    axes = grid(parameters)
    names = list(axes)
    combos = itertools.islice(itertools.product(*(axes[n] for n in names)), limit)
    return [dict(zip(names, combo)) for combo in combos]


def point(params: Dict[str, Any]) -> Dict[str, str]:
    """A trial's values as the text its command and environment receive."""
    return {name: _text(value) for name, value in params.items()}


def plain(value: Any) -> Any:
    """A value as JSON and YAML write it back (no numpy scalars, no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
