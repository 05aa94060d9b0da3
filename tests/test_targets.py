"""`hpclaunch render --target NAME` (launchers/targets/): the default is the sbatch script, byte for
byte; a built-in name or an installed package's entry point (group hpclaunch.targets) picks another
renderer; an unknown or broken target is one line, exit 2; the entry points are read only when a
name is not built in."""
import os
import subprocess
import sys

import pytest

from hlcli import modules_loaded

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "golden", "job.yaml")


def _hl(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hpclaunch", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("extra", [[], ["--target", "slurm"]])
def test_the_default_and_slurm_are_the_sbatch_script_byte_for_byte(extra):
    proc = _hl("render", JOB, "-o", "profile=a100-hpc", *extra)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(HERE, "golden", "a100-hpc-torchrun.sbatch")) as f:
        assert proc.stdout == f.read()


def test_an_unknown_target_is_one_line_naming_the_known_ones(tmp_path):
    proc = _hl("render", JOB, "--target", "slurmm")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stderr
    assert "--target 'slurmm': no such target" in lines[0] and "slurm" in lines[0].split("use one of")[1], lines
    assert "hpclaunch.targets" in lines[0], lines


def test_an_unknown_target_is_refused_before_the_job_file_is_read():
    proc = _hl("render", "/nonexistent/job.yaml", "--target", "nope")
    assert proc.returncode == 2 and "no such target" in proc.stderr and "nonexistent" not in proc.stderr


def _package(tmp_path, body, value="hl_fake_target:render", name="fake"):
    """An installed distribution on PYTHONPATH that declares target `name` (entry point group
    hpclaunch.targets), as `pip install` leaves one."""
    site = tmp_path / "site"
    info = site / "hl_fake_target-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hl-fake-target\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hpclaunch.targets]\n{name} = {value}\n")
    (site / "hl_fake_target.py").write_text(body)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def test_an_installed_package_adds_a_target_by_entry_point(tmp_path):
    env = _package(tmp_path, "def render(resolved):\n"
                             "    r = resolved.job.resources\n"
                             "    return f'fake {resolved.job.name} {r.nodes}x{r.tasks_per_node}\\n'\n")
    proc = _hl("render", JOB, "--target", "fake", "-o", "profile=a100-hpc", "-o", "resources.nodes=3", env=env)
    assert proc.returncode == 0 and proc.stdout == "fake golden job 3x4\n", proc.stderr
    listed = _hl("render", JOB, "--target", "nope", env=env)
    assert "use one of slurm" in listed.stderr and "fake" in listed.stderr, listed.stderr


def test_an_entry_point_cannot_take_over_a_built_in_name(tmp_path):
    env = _package(tmp_path, "def render(resolved):\n    return 'hijacked\\n'\n", name="slurm")
    proc = _hl("render", JOB, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("#!/bin/bash"), proc.stdout[:200]


@pytest.mark.parametrize("body,value,says", [
    ("raise ImportError('needs libfoo')\n", "hl_fake_target:render", "does not load: ImportError: needs libfoo"),
    ("render = 42\n", "hl_fake_target:render", "is not a function"),
    ("", "hl_fake_target:missing", "does not load: AttributeError"),
])
def test_a_broken_target_package_is_one_line_exit_2(tmp_path, body, value, says):
    proc = _hl("render", JOB, "--target", "fake", env=_package(tmp_path, body, value))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
    assert "--target 'fake'" in lines[0] and "Traceback" not in proc.stderr


def test_the_default_render_reads_no_entry_points():
    # importlib.metadata and the scan of every installed distribution are for names not built in
    code = f"from hpclaunch.cli import main\nmain(['render', {JOB!r}])"
    loaded = modules_loaded(code, ["importlib.metadata", "hpclaunch.launchers.render"])
    assert loaded == ["hpclaunch.launchers.render"], loaded


DOC = os.path.join(os.path.dirname(HERE), "docs", "targets.md")


def doc_commands(path=DOC):
    """(command, expected exit code) for each line of the page's ```bash blocks: 0, or the code its
    comment names ("# exit 2, ...")."""
    import re
    out = []
    for block in re.findall(r"```bash\n(.*?)```", open(path, encoding="utf-8").read(), re.S):
        for line in block.splitlines():
            command, _, comment = line.partition("#")
            if command.strip():
                m = re.match(r"\s*exit (\d+)", comment)
                out.append((command.strip(), int(m.group(1)) if m else 0))
    return out


def run_doc_command(command, tmp_path, job_text=None):
    """A command of the page as a reader runs it, in a folder holding job.yaml (the golden job) and
    the page's profile examples as ./hpc_profiles/NAME.yaml."""
    import re
    with open(JOB) as f:
        (tmp_path / "job.yaml").write_text(job_text or f.read())
    for block in re.findall(r"```yaml\n(.*?)```", open(DOC, encoding="utf-8").read(), re.S):
        m = re.match(r"name: ([\w.-]+)\n", block)
        if m:
            (tmp_path / "hpc_profiles").mkdir(exist_ok=True)
            (tmp_path / "hpc_profiles" / f"{m.group(1)}.yaml").write_text(block)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=120)


# kubectl needs a Kubernetes cluster with JobSet, which no test has: what it is given is checked
# against the Kubernetes and JobSet schemas instead (tests/test_kubernetes_target.py).
ELSEWHERE = ("kubectl ",)


@pytest.mark.parametrize("command,code", [c for c in doc_commands() if not c[0].startswith(ELSEWHERE)])
def test_the_pages_commands_do_what_it_says(command, code, tmp_path):
    proc = run_doc_command(command, tmp_path)
    assert proc.returncode == code, (command, proc.stdout[-2000:], proc.stderr)
    if code:
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_the_pages_entry_point_group_is_the_one_read():
    from hpclaunch.launchers.targets import GROUP
    assert f"{GROUP} =\n" in open(DOC, encoding="utf-8").read()


def test_the_pages_kubernetes_output_is_a_jobset_and_its_key_list_is_the_sections(tmp_path):
    import re
    from dataclasses import fields
    from hpclaunch.spec.kubernetes import KubernetesOptions
    [command] = [c for c, code in doc_commands() if "> jobset.yaml" in c]
    assert run_doc_command(command, tmp_path).returncode == 0
    text = (tmp_path / "jobset.yaml").read_text()
    assert "\nkind: JobSet\n" in text and "kueue.x-k8s.io/queue-name: team-a" in text
    page = open(DOC, encoding="utf-8").read()
    listed = re.search(r"lists every key of the section \((.*?)\),", page, re.S).group(1)
    assert re.findall(r"`(\w+)`", listed) == [f.name for f in fields(KubernetesOptions)]
