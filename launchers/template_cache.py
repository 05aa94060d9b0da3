"""The templates compiled by Jinja once, then run without importing jinja2 (template_runtime).

Importing jinja2 is about half of `hpclaunch render` and a third of `hpclaunch submit`, while the
templates are package data that change only with hpclaunch. So the first render compiles them with
Jinja (the same environment as always), checks that the compiled code uses only what
template_runtime provides, and keeps the code objects in the user cache under a key of the
templates' text, this Python and hpclaunch's version. Later renders load that entry and import no
jinja2. When the code needs more (a construct this runtime lacks) or the cache cannot be used, the
render goes through Jinja itself, as before: the output is the same either way.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Optional

from hpclaunch import templates  # package data, found the same way in editable and wheel installs
from hpclaunch.common import usercache
from hpclaunch.launchers import template_runtime as rt

if TYPE_CHECKING:  # `ast` costs ~5 ms to import: only compiling needs it, not a cached render
    import ast

# Bump when template_runtime changes what compiled code may rely on: older cache entries are then
# not read.
RUNTIME_VERSION = 2
RENDER_VARS = ("r", "s", "version")  # what backends/slurm_script.py passes to the templates
_HEADER = "from jinja2.runtime import "


class Unsupported(Exception):
    """The compiled code uses something template_runtime does not provide."""


def template_dir() -> str:
    return os.path.dirname(os.path.abspath(templates.__file__))


def sources() -> Dict[str, str]:
    """{name: text} of every template, in name order."""
    folder = template_dir()
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".j2"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                out[name] = f.read()
    return out


def jinja_environment():
    """Jinja's own environment for the templates: what compiles them, and renders when the
    compiled code cannot be used."""
    import jinja2  # heavy (~35-70 ms): only to compile, or when the compiled code cannot be used
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir()),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # shell, not HTML: quoting is explicit through the `q` filter
        comment_start_string="{#--",  # bash's ${#array[@]} would open a Jinja comment
        comment_end_string="--#}",
    )
    env.filters["q"] = rt.quote
    return env


def compile_all(texts: Dict[str, str], env: Any = None) -> Dict[str, Any]:
    """Each template's compiled module code, for template_runtime; Unsupported when any needs more."""
    import ast
    env = env or jinja_environment()
    pythons = {name: env.compile(text, name, os.path.join(template_dir(), name), raw=True)
               for name, text in texts.items()}
    trees = {name: check_header(name, source) for name, source in pythons.items()}
    assigned = {t.slice.value for tree in trees.values() for t in ast.walk(tree)
                if isinstance(t, ast.Subscript) and _is(t.value, "context", "vars") and isinstance(t.slice, ast.Constant)}
    allowed = set(RENDER_VARS) | set(rt.GLOBALS) | assigned
    code = {}
    for name, tree in trees.items():
        check_body(name, tree, allowed)
        code[name] = compile(tree, f"<template {name}>", "exec")
    return code


def check_header(name: str, source: str) -> ast.Module:
    """The compiled module with its jinja2.runtime import pointed at template_runtime."""
    import ast
    first, _, rest = source.partition("\n")
    if not first.startswith(_HEADER):
        raise Unsupported(f"{name}: compiled code starts {first[:60]!r}")
    names = [n.strip() for n in first[len(_HEADER):].split(",")]
    unknown = [n for n in names if n not in rt.PROVIDED + rt.REFUSED]
    if unknown:
        raise Unsupported(f"{name}: imports {', '.join(unknown)} from jinja2.runtime")
    return ast.parse(f"from hpclaunch.launchers.template_runtime import {', '.join(names)}\n{rest}")


def _is(node: ast.AST, name: str, attr: Optional[str] = None) -> bool:
    import ast
    if attr is None:
        return isinstance(node, ast.Name) and node.id == name
    return isinstance(node, ast.Attribute) and node.attr == attr and _is(node.value, name)


def check_body(name: str, tree: ast.Module, allowed_vars: set) -> None:
    """Refuse code that uses what template_runtime lacks: a name it only imports (macros, markup,
    namespaces), an environment or context method it does not have, a filter or test it does not
    define, a variable nobody passes, a recursive loop, template inheritance (blocks)."""
    import ast

    def refuse(what: str, node: ast.AST) -> None:
        raise Unsupported(f"{name}: line {getattr(node, 'lineno', '?')} of the compiled code uses {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in rt.REFUSED:
            refuse(node.id, node)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "environment" and node.attr not in rt.ENVIRONMENT_ATTRS:
                refuse(f"environment.{node.attr}", node)
            if node.value.id == "context" and node.attr not in rt.CONTEXT_ATTRS:
                refuse(f"context.{node.attr}", node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and _is(node.value.value, "environment"):
            table = {"filters": rt.FILTERS, "tests": rt.TESTS}.get(node.value.attr)
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if table is None or key not in table:
                refuse(f"environment.{node.value.attr}[{key!r}]", node)
        if isinstance(node, ast.Call):
            if _is(node.func, "resolve") or _is(node.func, "context", "resolve_or_missing"):
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and arg.value in allowed_vars):
                    refuse(f"the variable {getattr(arg, 'value', '?')!r}", node)
            if _is(node.func, "LoopContext") and (len(node.args) != 2 or node.keywords):
                refuse("a recursive loop", node)
        if isinstance(node, ast.Assign) and any(_is(t, "blocks") for t in node.targets):
            if not (isinstance(node.value, ast.Dict) and not node.value.keys):
                refuse("blocks", node)


def environment() -> Any:
    """The environment render.py uses: template_runtime's over the cached compiled code when it
    can be had, else Jinja's."""
    texts = sources()
    # The entry is used only when all of this equals today's, text for text (usercache.load).
    material = (RUNTIME_VERSION, texts, _own_source(rt.__file__), _own_source(__file__))
    name = f"templates-{usercache.key(RUNTIME_VERSION, texts=list(texts) + list(texts.values()))}.marshal"
    code = usercache.load(name, material)
    if isinstance(code, dict) and set(code) == set(texts):
        return rt.Environment(code)
    env = jinja_environment()
    try:
        code = compile_all(texts, env)
    except Unsupported:
        return env
    if usercache.store(name, material, code):  # one per version of the templates: keep the newest few
        usercache.prune("templates-", 4)
    return rt.Environment(code)


def _own_source(path: str) -> str:
    """A module's source text: what the compiled code was checked against changes with it."""
    try:
        with open(path.replace(".pyc", ".py"), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""
