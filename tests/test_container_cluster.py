"""A containerized 2-node job on the real test cluster (issue 16): podman, with an image built here
from local files (a root filesystem of bash and the shared libraries Python and torch load, made
with ldd and imported with `podman import`: nothing is pulled). The Python installation and the venv
are bind-mounted read-only, as HPC sites bind their software stacks; every rank's program runs in
the image, on both nodes, and DDP across them works."""
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = "localhost/hpclaunch-test-py:1"


def _libs(paths):
    found = set()
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        found.update(word for word in out.split() if word.startswith("/") and os.path.exists(word))
    return {p for p in found if not p.startswith((sys.base_prefix, sys.prefix))}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    assert shutil.which("podman"), "podman is missing: make deps installs it"
    root = tmp_path_factory.mktemp("rootfs")
    python = os.path.realpath(sys.executable)
    binaries = ["/bin/bash", python]
    for top in (os.path.join(sys.base_prefix, "lib"), os.path.join(sys.prefix, "lib")):
        for d, _, names in os.walk(top):
            binaries += [os.path.join(d, n) for n in names if ".so" in n and ("torch" in d or "dynload" in d
                                                                           or "numpy" in d)]
    for lib in sorted(_libs(binaries)) + ["/bin/bash"]:
        dest = root / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dest)
    for d in ("tmp", "proc", "dev", "sys", "root", "etc"):
        (root / d).mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    (root / "hpclaunch-image").write_text("built from local files\n")
    tar = tmp_path_factory.mktemp("img") / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(str(root), arcname=".")
    proc = subprocess.run(["podman", "import", "-q", str(tar), IMAGE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return IMAGE


def test_podman_two_node_ddp_in_an_image_built_here(slurm, hpc_home, tmp_path, image):
    conf = tmp_path / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n')
    (tmp_path / "hpc_profiles").mkdir()
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        f"name: site\nextends: testcluster\ncontainer: {{runtime: podman}}\nenv: {{CONTAINERS_CONF: {conf}}}\n")
    ex = os.path.join(ROOT, "examples")
    program = ("import runpy, sys; print('image:', open('/hpclaunch-image').read().strip(), flush=True); "
               f"sys.argv = ['ddp_check.py', '3']; runpy.run_path('{ex}/ddp_check.py', run_name='__main__')")
    (tmp_path / "job.yaml").write_text(f"""
name: in a container
profile: site
launcher: srun
command: [{sys.executable}, -c, "{program}"]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 1}}
container:
  image: {image}
  mounts: ["{sys.base_prefix}:{sys.base_prefix}:ro", "{sys.prefix}:{sys.prefix}:ro", "{ex}:{ex}:ro"]
""")
    proc = hl("submit", "job.yaml", "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=400)
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    logs = {r: open(os.path.join(run_dir, "logs", "attempt0", f"rank{r}.log")).read() for r in (0, 1)}
    assert proc.returncode == 0, (proc.stderr, logs)
    for r, host in ((0, "c1"), (1, "c2")):
        assert "image: built from local files" in logs[r], logs[r]
        assert f"host {host}" in logs[r], logs[r]
    assert "params identical: True" in logs[0], logs[0]
    # the monitor ran outside, on both nodes
    assert sorted(n for n in os.listdir(os.path.join(run_dir, "monitor")) if n.endswith(".csv"))
    script = open(os.path.join(run_dir, "script.sbatch")).read()
    assert "hl_ctr=(podman run --rm" in script and f"{image}" in script
