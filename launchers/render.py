"""Pure rendering: a BatchRequest to the text of an sbatch script (Jinja templates in templates/,
through launchers/templating.py: compiled when the wheel is built, from the sources in a checkout)."""
from __future__ import annotations

from hpclaunch.common.version import __version__
from hpclaunch.launchers import templating
from hpclaunch.launchers.request import BatchRequest, build_request

_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        _ENV = templating.environment()
    return _ENV


def render_script(request: BatchRequest) -> str:
    return _environment().get_template("job.sbatch.j2").render(r=request, version=__version__)


def render_job(resolved) -> str:
    return render_script(build_request(resolved))
