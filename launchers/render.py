"""Pure rendering: a BatchRequest to the text of an sbatch script (Jinja templates in templates/)."""
from __future__ import annotations

import os
import shlex

from hpclaunch import templates  # package data, found the same way in editable and wheel installs
from hpclaunch.common.version import __version__
from hpclaunch.launchers.request import BatchRequest, build_request

_ENV = None


def _template_dir() -> str:
    return os.path.dirname(os.path.abspath(templates.__file__))


def _environment():
    global _ENV
    if _ENV is None:
        import jinja2
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_template_dir()),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,  # shell, not HTML: quoting is explicit through the `q` filter
            comment_start_string="{#--",  # bash's ${#array[@]} would open a Jinja comment
            comment_end_string="--#}",
            bytecode_cache=_bytecode_cache(jinja2),
        )
        _ENV.filters["q"] = _quote
    return _ENV


def _bytecode_cache(jinja2):
    """Compiled templates cached per user: compiling them costs more than rendering (slow shared FS)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "hpclaunch", "jinja")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not os.access(folder, os.W_OK):
            return None
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(folder)


def _quote(value: object) -> str:
    """Single-quote for bash: the value reaches the process byte for byte, and nothing in it runs."""
    return shlex.quote(str(value))


def render_script(request: BatchRequest) -> str:
    text = _environment().get_template("job.sbatch.j2").render(r=request, version=__version__)
    return text


def render_job(resolved) -> str:
    return render_script(build_request(resolved))
