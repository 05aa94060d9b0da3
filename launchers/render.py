"""Pure rendering: a BatchRequest to the text of an sbatch script (Jinja templates in templates/,
run through launchers/template_cache.py: compiled once, then without importing jinja2)."""
from __future__ import annotations

from hpclaunch.common.version import __version__
from hpclaunch.launchers import template_cache
from hpclaunch.launchers.request import BatchRequest, build_request

_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        _ENV = template_cache.environment()
    return _ENV


def render_script(request: BatchRequest) -> str:
    return _environment().get_template("job.sbatch.j2").render(r=request, version=__version__)


def render_job(resolved) -> str:
    return render_script(build_request(resolved))
