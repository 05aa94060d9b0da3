"""The compiled-template cache (launchers/template_cache.py, template_runtime.py, common/usercache.py):
the same bytes as Jinja for every shipped profile x launcher, no jinja2 import once cached, and a
cache that is never trusted when stale, damaged or not the user's own."""
import os
import subprocess
import sys

import pytest

from hpclaunch.common import usercache
from hpclaunch.common.version import __version__
from hpclaunch.launchers import template_cache, template_runtime
from hpclaunch.launchers.backends import slurm_script
from hpclaunch.launchers.plan import build_plan
from hpclaunch.spec.loading import resolve_job

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "golden", "job.yaml")
PROFILES = ["local", "a100-hpc", "testcluster", "jetson-orin", "workstation",
            os.path.join(HERE, "golden", "profiles", "ctr-pyxis.yaml"),
            os.path.join(HERE, "golden", "profiles", "ctr-apptainer.yaml")]
LAUNCHERS = ["torchrun", "horovod", "mpi", "srun", "ray", "tensorflow", "jax", "lightning"]
VARIANTS = [[], ["monitor.interval=0"], ["requeue.max_attempts=1"], ["slurm.extra=[--reservation=maint]"],
            ["container={image: 'img:1', mounts: ['/data:/data:ro'], env: [WANDB_MODE]}"]]


def _render(env, overrides):
    try:
        request = slurm_script.prepare(build_plan(resolve_job(JOB, overrides)))
    except Exception as e:  # a combination the schema refuses: both sides skip it alike
        return f"refused: {type(e).__name__}"
    return env.get_template("job.sbatch.j2").render(r=request.plan, s=request, version=__version__)


def test_runtime_renders_the_same_bytes_as_jinja():
    texts = template_cache.sources()
    jinja = template_cache.jinja_environment()
    ours = template_runtime.Environment(template_cache.compile_all(texts, jinja))
    rendered = 0
    for profile in PROFILES:
        for launcher in LAUNCHERS:
            for extra in VARIANTS:
                overrides = [f"profile={profile}", f"launcher={launcher}"] + extra
                a, b = _render(jinja, overrides), _render(ours, overrides)
                assert a == b, f"{overrides}: template_runtime differs from Jinja"
                rendered += not a.startswith("refused")
    assert rendered >= 150  # most combinations render: the comparison is not of two refusals


def test_missing_value_is_an_error_as_in_jinja():
    code = template_cache.compile_all({"t.j2": "{{ r.nope }}"})
    with pytest.raises(template_runtime.UndefinedError):
        template_runtime.Environment(code).get_template("t.j2").render(r=object(), version="x")


def test_code_needing_more_than_the_runtime_is_refused():
    for text in ["{% macro m() %}x{% endmacro %}{{ m() }}", "{{ r | upper }}", "{{ other }}",
                 "{% for x in r recursive %}{{ loop(x) }}{% endfor %}"]:
        with pytest.raises(template_cache.Unsupported):
            template_cache.compile_all({"t.j2": text})


def _render_in_subprocess(cache_home):
    code = ("import sys; from hpclaunch.launchers.render import render_job; "
            "from hpclaunch.spec.loading import resolve_job; "
            f"t = render_job(resolve_job({JOB!r}, ['profile=a100-hpc'])); "
            "print('jinja2' in sys.modules, len(t))")
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split()


def test_second_render_imports_no_jinja2(cache_home):
    first, second = _render_in_subprocess(cache_home), _render_in_subprocess(cache_home)
    assert first[0] == "True" and second[0] == "False"
    assert first[1] == second[1]
    entries = os.listdir(cache_home / "hpclaunch")
    assert len([e for e in entries if e.startswith("templates-")]) == 1
    assert oct((cache_home / "hpclaunch").stat().st_mode & 0o777) == "0o700"
    assert all((cache_home / "hpclaunch" / e).stat().st_mode & 0o077 == 0 for e in entries)


def test_entry_used_only_for_the_same_material(cache_home):
    usercache.store("x", ("a", {"t.j2": "text"}), {"t.j2": 1})
    assert usercache.load("x", ("a", {"t.j2": "text"})) == {"t.j2": 1}
    assert usercache.load("x", ("a", {"t.j2": "text "})) is None  # one byte of a template changed
    assert usercache.load("y", ("a", {"t.j2": "text"})) is None


def test_damaged_entry_is_made_again(cache_home):
    template_cache.environment()
    folder = cache_home / "hpclaunch"
    (entry,) = [p for p in folder.iterdir() if p.name.startswith("templates-")]
    entry.write_bytes(entry.read_bytes()[:50])
    assert isinstance(template_cache.environment(), template_runtime.Environment)
    assert len(entry.read_bytes()) > 50


def test_folder_writable_by_others_or_not_ours_is_not_used(cache_home):
    folder = cache_home / "hpclaunch"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert usercache.folder() is None
    usercache.store("x", ("m",), 1)
    assert not (folder / "x").exists()
    folder.chmod(0o700)
    assert usercache.folder() == str(folder)


def test_unusable_cache_still_renders(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    env = template_cache.environment()
    assert _render(env, ["profile=local"]).startswith("#!/bin/bash\n")


def test_help_from_cache_is_argparse_help(cache_home):
    from hpclaunch.cli import parser
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home), COLUMNS="100")
    code = ("import sys; from hpclaunch.cli import main; main(['--help']); "
            "print('argparse' in sys.modules or 'typing' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
            for _ in range(2)]
    os.environ["COLUMNS"], saved = "100", os.environ.get("COLUMNS")
    try:
        expected = parser.build().format_help()
    finally:
        os.environ.pop("COLUMNS") if saved is None else os.environ.__setitem__("COLUMNS", saved)
    assert runs[0] == expected + "True\n"
    assert runs[1] == expected + "False\n"  # the second one loaded no argparse, nor typing (re, enum...)


def test_every_cache_keeps_only_its_newest_entries(cache_home, tmp_path, monkeypatch):
    """Each entry is keyed by what it was made from: a new slurm.conf (every edit), terminal width or
    template version makes a new one, so each kind keeps only its newest few (as parsed YAML does)."""
    from hpclaunch.cli import top_help
    from hpclaunch.launchers.backends import slurm_facts

    def entries(prefix):
        return sorted(n for n in os.listdir(cache_home / "hpclaunch") if n.startswith(prefix))

    conf = tmp_path / "slurm.conf"
    monkeypatch.setenv("SLURM_CONF", str(conf))
    texts = {k: f"{k} text\n" for k in slurm_facts.KINDS}
    for i in range(slurm_facts.CACHED_CONFS + 4):
        conf.write_text(f"ClusterName=c{i}\n" + "#" * i)  # another size: another slurm.conf version
        slurm_facts.store(texts)
    assert len(entries("slurm-facts-")) == slurm_facts.CACHED_CONFS
    assert slurm_facts.load() == texts  # the newest is among them
    for width in range(60, 72):
        monkeypatch.setenv("COLUMNS", str(width))
        top_help()
    assert len(entries("help-")) == 8
    for i in range(6):
        monkeypatch.setattr(template_cache, "sources", lambda i=i: {"x.j2": f"version {i}"})
        template_cache.environment()
    assert len(entries("templates-")) == 4
