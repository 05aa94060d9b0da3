"""What our Jinja templates need at render time, without importing jinja2.

Jinja compiles a template to Python source that calls a few names from ``jinja2.runtime`` and a few
methods of the environment and the context. Importing jinja2 costs more than the rest of
`hpclaunch submit` together (it pulls in its compiler, lexer, ``inspect``, ``ast``...), and the
templates are fixed package data. So launchers/template_cache.py has Jinja compile them once, checks
that the code uses nothing but what this module provides, and runs it here. The semantics are
Jinja 3's for what is provided (StrictUndefined for missing values, Jinja's attribute lookup, the
loop object); tests/test_template_cache.py renders every profile x launcher both ways and requires
the same bytes.
"""
from __future__ import annotations

import shlex
from typing import Any, Callable, Dict, Iterable, Iterator, Optional

# The names compiled code imports from jinja2.runtime: those it may use, and those it imports
# but must not use (template_cache refuses code that does; the names exist so the import works).
PROVIDED = ("LoopContext", "Undefined", "identity", "internalcode", "missing", "str_join",
            "TemplateNotFound", "TemplateRuntimeError")
REFUSED = ("Macro", "Markup", "Namespace", "TemplateReference", "escape", "markup_join")
ENVIRONMENT_ATTRS = ("getattr", "getitem", "undefined", "concat", "get_template", "get_or_select_template",
                     "filters", "tests")
CONTEXT_ATTRS = ("resolve_or_missing", "get_all", "vars", "exported_vars")
GLOBALS = {"range": range, "dict": dict}


def quote(value: object) -> str:
    """Single-quote for bash: the value reaches the process byte for byte, and nothing in it runs."""
    return shlex.quote(str(value))


FILTERS: Dict[str, Callable[..., Any]] = {"q": quote, "length": len}
TESTS: Dict[str, Callable[..., bool]] = {"none": lambda value: value is None,
                                          "defined": lambda value: not isinstance(value, Undefined),
                                          "undefined": lambda value: isinstance(value, Undefined)}


class _Missing:
    def __repr__(self) -> str:
        return "missing"


missing: Any = _Missing()


class TemplateRuntimeError(Exception):
    pass


class TemplateNotFound(TemplateRuntimeError):
    pass


class UndefinedError(TemplateRuntimeError):
    pass


def identity(x: Any) -> Any:
    return x


internalcode = identity  # Jinja's marker for its own frames in tracebacks


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise TemplateRuntimeError("template_cache lets no code that uses this through")


# Imported by every compiled template, used by none that template_cache accepts.
Macro = Markup = Namespace = TemplateReference = escape = markup_join = _refused


def str_join(seq: Iterable[Any]) -> str:
    return "".join(map(str, seq))


class Undefined:
    """Jinja's lenient Undefined (what `x if c` without else gives): empty when printed."""

    __slots__ = ("_hint", "_obj", "_name")

    def __init__(self, hint: Optional[str] = None, obj: Any = missing, name: Optional[str] = None,
                 exc: Any = None) -> None:
        self._hint, self._obj, self._name = hint, obj, name

    def _message(self) -> str:
        if self._hint:
            return self._hint
        if self._obj is missing:
            return f"{self._name!r} is undefined"
        return f"{type(self._obj).__name__} object has no attribute {self._name!r}"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UndefinedError(self._message())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._fail()

    __call__ = __getitem__ = __add__ = __radd__ = __sub__ = __mul__ = __lt__ = __gt__ = _fail

    def __str__(self) -> str:
        return ""

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return id(type(self))


class StrictUndefined(Undefined):
    """The environment's Undefined: any use but `is none` / `is defined` is an error."""

    __slots__ = ()
    __str__ = __iter__ = __bool__ = __len__ = __eq__ = __ne__ = __contains__ = Undefined._fail  # type: ignore
    __hash__ = Undefined._fail  # type: ignore


class LoopContext:
    """The `loop` variable of a for loop (index, index0, first, last, length, revindex...)."""

    def __init__(self, iterable: Iterable[Any], undefined: Callable[..., Any]) -> None:
        self._items = list(iterable)
        self._undefined = undefined
        self.index0 = -1
        self._last_changed: Any = missing

    def __iter__(self) -> Iterator[tuple]:
        for i, item in enumerate(self._items):
            self.index0 = i
            yield item, self

    @property
    def length(self) -> int:
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def index(self) -> int:
        return self.index0 + 1

    @property
    def revindex0(self) -> int:
        return len(self._items) - self.index

    @property
    def revindex(self) -> int:
        return len(self._items) - self.index0

    @property
    def first(self) -> bool:
        return self.index0 == 0

    @property
    def last(self) -> bool:
        return self.index0 == len(self._items) - 1

    @property
    def previtem(self) -> Any:
        return self._items[self.index0 - 1] if self.index0 > 0 else self._undefined("there is no previous item")

    @property
    def nextitem(self) -> Any:
        i = self.index0 + 1
        return self._items[i] if i < len(self._items) else self._undefined("there is no next item")

    def cycle(self, *args: Any) -> Any:
        if not args:
            raise TypeError("no items for cycling given")
        return args[self.index0 % len(args)]

    def changed(self, *value: Any) -> bool:
        if self._last_changed != value:
            self._last_changed = value
            return True
        return False


class Context:
    """The variables a template sees: its own (`{% set %}`) over those it was given."""

    __slots__ = ("parent", "vars", "exported_vars")

    def __init__(self, parent: Dict[str, Any]) -> None:
        self.parent = parent
        self.vars: Dict[str, Any] = {}
        self.exported_vars: set = set()

    def resolve_or_missing(self, key: str) -> Any:
        if key in self.vars:
            return self.vars[key]
        return self.parent.get(key, missing)

    def get_all(self) -> Dict[str, Any]:
        if not self.vars:
            return self.parent
        if not self.parent:
            return self.vars
        return dict(self.parent, **self.vars)


class Template:
    def __init__(self, name: str, root: Callable[[Context], Iterator[str]]) -> None:
        self.name = name
        self.root_render_func = root

    def new_context(self, vars: Optional[Dict[str, Any]] = None, shared: bool = False,
                    locals: Optional[Dict[str, Any]] = None) -> Context:
        parent = dict(vars or {}) if shared else dict(GLOBALS, **(vars or {}))
        for key, value in (locals or {}).items():
            if value is not missing:
                parent[key] = value
        return Context(parent)

    def render(self, **variables: Any) -> str:
        return "".join(self.root_render_func(self.new_context(variables)))


class Environment:
    """Runs templates compiled by Jinja (template_cache): ``code`` maps each template's name to its
    compiled module code, executed on first use with this environment as its ``environment``."""

    undefined = StrictUndefined
    filters = FILTERS
    tests = TESTS

    def __init__(self, code: Dict[str, Any]) -> None:
        self._code = code
        self._templates: Dict[str, Template] = {}

    @staticmethod
    def concat(parts: Iterable[str]) -> str:
        return "".join(parts)

    def getattr(self, obj: Any, attribute: str) -> Any:
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError, AttributeError):
            return self.undefined(obj=obj, name=attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        try:
            return obj[argument]
        except (AttributeError, TypeError, LookupError):
            if isinstance(argument, str):
                try:
                    return getattr(obj, argument)
                except AttributeError:
                    pass
            return self.undefined(obj=obj, name=argument)

    def get_template(self, name: str, parent: Optional[str] = None) -> Template:
        template = self._templates.get(name)
        if template is None:
            code = self._code.get(name)
            if code is None:
                raise TemplateNotFound(name)
            namespace: Dict[str, Any] = {"environment": self, "__name__": f"hpclaunch.templates.{name}"}
            exec(code, namespace)
            template = self._templates[name] = Template(name, namespace["root"])
        return template

    def get_or_select_template(self, name: Any, parent: Optional[str] = None) -> Template:
        if isinstance(name, str):
            return self.get_template(name, parent)
        for one in name:
            if one in self._code:
                return self.get_template(one, parent)
        raise TemplateNotFound(str(name))
