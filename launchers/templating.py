"""The Jinja environment of the job templates (templates/*.j2), plain Jinja: compiled when the wheel
is built, from the sources in a checkout.

A wheel carries the templates compiled to Python modules (Jinja's ``Environment.compile_templates``,
run by setup.py's build step into ``hpclaunch/templates/_compiled/``) and renders them through
Jinja's ``ModuleLoader``: imported as bytecode like any module, no parse or compile at render time.
That compile is ~20 ms of a render (Jinja's lexer, parser and code generator over ~580 lines), and
`hpclaunch render` has a budget of 1.3x `python -c 'import jinja2, yaml'` (docs/benchmarks.md).

The compiled modules are used only when they were made from these very texts by this Jinja version
(``MANIFEST``: the Jinja version, then the sha256 of each template), so an edited installed
template or another Jinja never runs stale code; otherwise, and in a source checkout or an editable
install (no build step ran), Jinja compiles the sources itself. The output is the same bytes either
way (tests/test_templating.py).

This module imports nothing of hpclaunch at its top: setup.py loads it by path to compile.
"""
from __future__ import annotations

import hashlib
import os
import shlex
from typing import Any, Dict, Optional

COMPILED = "_compiled"          # the folder, beside the templates, that a wheel's build writes
MANIFEST = "MANIFEST"           # in it: "jinja2 <version>", then "<sha256> <name>" per template


def quote(value: object) -> str:
    """Single-quote for bash: the value reaches the process byte for byte, and nothing in it runs."""
    return shlex.quote(str(value))


def template_dir() -> str:
    from hpclaunch import templates  # package data, found the same way in editable and wheel installs
    return os.path.dirname(os.path.abspath(templates.__file__))


def make_environment(loader: Any):
    """The one environment the templates are compiled and rendered with."""
    import jinja2  # heavy (~35 ms): only the commands that render load this module
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # shell, not HTML: quoting is explicit through the `q` filter
        comment_start_string="{#--",  # bash's ${#array[@]} would open a Jinja comment
        comment_end_string="--#}",
    )
    env.filters["q"] = quote  # before any compile: Jinja resolves filters when it compiles
    return env


def environment(folder: Optional[str] = None):
    """The environment render.py uses: over the compiled templates when they match the sources,
    else over the sources."""
    import jinja2
    folder = folder or template_dir()
    compiled = os.path.join(folder, COMPILED)
    if _manifest(folder) == _read_manifest(compiled):
        return make_environment(jinja2.ModuleLoader(compiled))
    return make_environment(jinja2.FileSystemLoader(folder))


def compile_into(folder: str, target: str) -> int:
    """Compile every template of ``folder`` into ``target`` (the build step); the count compiled.
    Any template that does not compile fails the build: a wheel never ships one that cannot render."""
    env = make_environment(__import__("jinja2").FileSystemLoader(folder))
    os.makedirs(target, exist_ok=True)
    names = sorted(_sources(folder))
    env.compile_templates(target, zip=None, filter_func=lambda name: name in names, ignore_errors=False)
    with open(os.path.join(target, MANIFEST), "w", encoding="utf-8") as f:
        f.write(_manifest(folder))
    return len(names)


def _sources(folder: str) -> Dict[str, str]:
    """{name as Jinja names it: path} of every template under ``folder``."""
    out = {}
    for dirpath, dirnames, files in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in (COMPILED, "__pycache__"))
        for name in files:
            if name.endswith(".j2"):
                path = os.path.join(dirpath, name)
                out[os.path.relpath(path, folder).replace(os.sep, "/")] = path
    return out


def _manifest(folder: str) -> str:
    """What compiled templates must have been made from: this Jinja and these texts."""
    from jinja2 import __version__ as jinja_version
    lines = [f"jinja2 {jinja_version}"]
    for name, path in sorted(_sources(folder).items()):
        with open(path, "rb") as f:
            lines.append(f"{hashlib.sha256(f.read()).hexdigest()} {name}")
    return "\n".join(lines) + "\n"


def _read_manifest(compiled: str) -> Optional[str]:
    try:
        with open(os.path.join(compiled, MANIFEST), encoding="utf-8") as f:
            return f.read(1 << 16)
    except (OSError, ValueError):
        return None  # none (a checkout) or unreadable: the sources are compiled instead
