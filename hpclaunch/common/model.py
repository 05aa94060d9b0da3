"""A minimal record class for the models on the render path.

`dataclasses` would do, but it imports `inspect`, which alone costs a third of the renderer's
start-up budget above `import jinja2, yaml` (docs/benchmarks.md). This keeps the same surface the
schema engine needs (`field`, `fields`, `is_model`, `MISSING`) and nothing more.
"""
from __future__ import annotations

from typing import Any

MISSING: Any = type("MISSING", (), {"__repr__": lambda self: "MISSING"})()


class Field:
    __slots__ = ("name", "default", "default_factory", "metadata")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, metadata: Any = None):
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.metadata = metadata or {}


def field(default: Any = MISSING, *, default_factory: Any = MISSING, metadata: Any = None) -> Any:
    return Field(default, default_factory, metadata)


def model(cls: type | None = None, *, frozen: bool = False):
    """Class decorator: keyword/positional __init__ from the annotations, defaults, __repr__, __eq__;
    calls ``__post_init__`` after __init__ when the class has one."""

    def wrap(c: type) -> type:
        own = []
        for name in c.__dict__.get("__annotations__", {}):
            value = c.__dict__.get(name, MISSING)
            f = value if isinstance(value, Field) else Field(default=value)
            f.name = name
            own.append(f)
            if isinstance(value, Field):
                if f.default is MISSING:
                    delattr(c, name)
                else:
                    setattr(c, name, f.default)
        inherited = [f for base in c.__mro__[1:] for f in getattr(base, "__model_fields__", ())]
        all_fields = tuple(inherited + own)
        c.__model_fields__ = all_fields
        names = [f.name for f in all_fields]
        post_init = getattr(c, "__post_init__", None)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if len(args) > len(names):
                raise TypeError(f"{c.__name__}() takes {len(names)} arguments, {len(args)} given")
            values = dict(zip(names, args))
            for key, value in kwargs.items():
                if key not in names or key in values:
                    raise TypeError(f"{c.__name__}() got an unexpected or repeated argument {key!r}")
                values[key] = value
            for f in all_fields:
                if f.name in values:
                    value = values[f.name]
                elif f.default_factory is not MISSING:
                    value = f.default_factory()
                elif f.default is not MISSING:
                    value = f.default
                else:
                    raise TypeError(f"{c.__name__}() missing argument {f.name!r}")
                object.__setattr__(self, f.name, value)
            if post_init is not None:
                post_init(self)

        def __repr__(self) -> str:
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
            return f"{c.__name__}({inner})"

        def __eq__(self, other: Any) -> bool:
            if other.__class__ is not self.__class__:
                return NotImplemented
            return all(getattr(self, n) == getattr(other, n) for n in names)

        c.__init__ = __init__
        c.__repr__ = __repr__
        c.__eq__ = __eq__
        c.__hash__ = None  # type: ignore[assignment]
        if frozen:
            def __setattr__(self, name: str, value: Any) -> None:
                raise AttributeError(f"{c.__name__} is frozen")
            c.__setattr__ = __setattr__
            c.__hash__ = lambda self: hash(tuple(_hashable(getattr(self, n)) for n in names))  # type: ignore
        return c

    return wrap if cls is None else wrap(cls)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def fields(obj: Any) -> tuple[Field, ...]:
    return obj.__model_fields__


def is_model(obj: Any) -> bool:
    return hasattr(obj, "__model_fields__")
