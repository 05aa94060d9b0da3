"""The job templates through plain Jinja (launchers/templating.py): compiled into the wheel at build
time (setup.py) and rendered by Jinja's ModuleLoader, the same bytes as Jinja compiling the sources,
and never stale code: compiled templates are used only for the texts and the Jinja they were made by."""
import os
import shutil
import subprocess
import sys

import jinja2
import pytest

from hpclaunch.common.version import __version__
from hpclaunch.launchers import templating
from hpclaunch.launchers.backends import slurm_script
from hpclaunch.launchers.plan import build_plan
from hpclaunch.spec.loading import resolve_job

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "golden", "job.yaml")
PROFILES = ["local", "a100-hpc", "testcluster", "jetson-orin", "workstation",
            os.path.join(HERE, "golden", "profiles", "ctr-pyxis.yaml"),
            os.path.join(HERE, "golden", "profiles", "ctr-apptainer.yaml")]
LAUNCHERS = ["torchrun", "horovod", "mpi", "srun", "ray", "tensorflow", "accelerate", "jax", "lightning"]
VARIANTS = [[], ["monitor.interval=0"], ["requeue.max_attempts=1"], ["slurm.extra=[--reservation=maint]"],
            ["container={image: 'img:1', mounts: ['/data:/data:ro'], env: [WANDB_MODE]}"]]


def _render(env, overrides):
    try:
        request = slurm_script.prepare(build_plan(resolve_job(JOB, overrides)))
    except Exception as e:  # a combination the schema refuses: both sides skip it alike
        return f"refused: {type(e).__name__}"
    return env.get_template("job.sbatch.j2").render(r=request.plan, s=request, version=__version__)


@pytest.fixture
def compiled_copy(tmp_path):
    """A copy of the templates folder with its compiled modules, as setup.py's build step makes it."""
    folder = tmp_path / "templates"
    shutil.copytree(templating.template_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "_compiled"))
    count = templating.compile_into(str(folder), str(folder / templating.COMPILED))
    assert count == len([n for n in os.listdir(folder) if n.endswith(".j2")]) >= 10
    return folder


def test_compiled_templates_render_the_same_bytes_as_the_sources(compiled_copy):
    compiled = templating.environment(str(compiled_copy))
    assert isinstance(compiled.loader, jinja2.ModuleLoader)
    sources = templating.environment(templating.template_dir())
    assert isinstance(sources.loader, jinja2.FileSystemLoader)  # a checkout has no compiled templates
    rendered = 0
    for profile in PROFILES:
        for launcher in LAUNCHERS:
            for extra in VARIANTS:
                overrides = [f"profile={profile}", f"launcher={launcher}"] + extra
                a, b = _render(sources, overrides), _render(compiled, overrides)
                assert a == b, f"{overrides}: the compiled templates differ from the sources"
                rendered += not a.startswith("refused")
    assert rendered >= 150  # most combinations render: the comparison is not of two refusals


def test_compiled_templates_are_not_used_once_a_source_changed(compiled_copy):
    (compiled_copy / "srun.j2").write_text((compiled_copy / "srun.j2").read_text() + "# edited\n")
    assert isinstance(templating.environment(str(compiled_copy)).loader, jinja2.FileSystemLoader)


def test_compiled_templates_are_not_used_by_another_jinja(compiled_copy):
    manifest = compiled_copy / templating.COMPILED / templating.MANIFEST
    manifest.write_text(manifest.read_text().replace(f"jinja2 {jinja2.__version__}\n", "jinja2 2.11.3\n", 1))
    assert isinstance(templating.environment(str(compiled_copy)).loader, jinja2.FileSystemLoader)
    manifest.write_bytes(b"\0" * 100)  # damaged: the sources again
    assert isinstance(templating.environment(str(compiled_copy)).loader, jinja2.FileSystemLoader)


def test_a_template_that_does_not_compile_fails_the_build(tmp_path):
    (tmp_path / "bad.j2").write_text("{{ r | no_such_filter }}\n")
    with pytest.raises(jinja2.TemplateError):
        templating.compile_into(str(tmp_path), str(tmp_path / templating.COMPILED))


def test_missing_value_is_an_error(compiled_copy):
    (compiled_copy / "t.j2").write_text("{{ r.nope }}")
    with pytest.raises(jinja2.UndefinedError):
        templating.environment(str(compiled_copy)).get_template("t.j2").render(r=object(), version="x")


def test_render_writes_nothing_in_the_user_cache(tmp_path):
    """No compiled code kept per user any more: a render leaves the cache folder as it found it."""
    code = ("from hpclaunch.launchers.render import render_job; from hpclaunch.spec.loading import resolve_job; "
            f"print(len(render_job(resolve_job({JOB!r}, ['profile=a100-hpc']))))")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    left = os.listdir(tmp_path / "cache" / "hpclaunch") if (tmp_path / "cache" / "hpclaunch").exists() else []
    assert not [n for n in left if not n.startswith("yaml-")], left  # only the parsed job file
