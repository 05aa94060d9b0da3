"""Whole rendered scripts against golden files, and `bash -n` on each.

Regenerate after an intended change with:  make golden  (UPDATE_GOLDEN=1 pytest tests/test_render_golden.py)
then review the diff like code.
"""
import os
import subprocess

import pytest

from hpclaunch.launchers import modes
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
JOB = os.path.join(GOLDEN, "job.yaml")
PROFILES = ["local", "a100-hpc", "testcluster", "jetson-orin", "workstation"]
LAUNCHERS = list(modes.BUILT_IN)  # each launcher module's goldens (`make golden` writes a new one's)


def _render(profile, launcher):
    return render_job(resolve_job(JOB, [f"profile={profile}", f"launcher={launcher}"]))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_golden(profile, launcher):
    text = _render(profile, launcher)
    path = os.path.join(GOLDEN, f"{profile}-{launcher}.sbatch")
    if os.environ.get("UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(text)
    assert os.path.exists(path), f"no golden file {path}: run `make golden`"
    with open(path) as f:
        expected = f.read()
    assert text == expected, f"{path} differs; if the change is intended run `make golden` and review the diff"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_bash_syntax(profile, launcher, tmp_path):
    script = tmp_path / "s.sbatch"
    script.write_text(_render(profile, launcher))
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_deterministic():
    assert _render("a100-hpc", "torchrun") == _render("a100-hpc", "torchrun")


def test_torchrun_shape():
    text = render_job(resolve_job(JOB, ["profile=a100-hpc", "resources.nodes=4"]))
    assert "#SBATCH --nodes=4\n" in text
    assert "#SBATCH --ntasks-per-node=1\n" in text          # one torchrun per node
    assert "#SBATCH --cpus-per-task=64\n" in text           # 4 ranks x 16 CPUs
    assert "#SBATCH --gpus-per-node=4\n" in text
    assert "--nnodes=4 --nproc-per-node=4" in text
    assert '--rdzv-endpoint="$hl_head:$hl_port"' in text
    assert '--log-dir="$HPCLAUNCH_LOG_DIR/torchelastic"' in text  # not a torchelastic_* in each node's /tmp
    assert "\nhl_begin\n" in text                            # the hosts: job.sh's (tests/test_job_runtime.py)
    assert "#SBATCH --signal=B:USR2@120\n" in text        # USR2 by default: docs/requeue.md
    assert "module load cuda/12.4" in text


def test_gres_form(write):
    prof = write("hpc_profiles/site.yaml", "name: site\nextends: a100-hpc\ngpu_request: gres\ngres_name: gpu\n")
    job = write("j.yaml", f"name: j\nprofile: {prof}\ncommand: [python, t.py]\n")
    text = render_job(resolve_job(job))
    assert "#SBATCH --gres=gpu:4\n" in text and "--gpus-per-node" not in text


def test_monitor_off_and_fixed_port():
    text = render_job(resolve_job(JOB, ["monitor.interval=0", "rendezvous.port=29999"]))
    assert "hpclaunch.monitors" not in text
    assert "hl_port=${HPCLAUNCH_RDZV_PORT:-29999}" in text


def test_no_requeue_when_one_attempt():
    text = render_job(resolve_job(JOB, ["requeue.max_attempts=1"]))
    assert "#SBATCH --no-requeue\n" in text and "--signal" not in text


def test_extra_directives_and_mpirun():
    text = render_job(resolve_job(JOB, ["launcher=mpi", "slurm.extra=[--reservation=maint, --mail-type=END]"]))
    assert "#SBATCH --reservation=maint\n#SBATCH --mail-type=END\n" in text
    assert 'mpirun -np 2 -H "$hl_hosts"' in text  # the local profile starts MPI with mpirun


CONTAINER_RUNTIMES = ["pyxis", "apptainer", "podman"]


def _render_container(runtime, launcher):
    prof = os.path.join(GOLDEN, "profiles", f"ctr-{runtime}.yaml")
    return render_job(resolve_job(JOB, [f"profile={prof}", f"launcher={launcher}",
                                        "container={image: 'nvcr.io#nvidia/pytorch:24.05-py3', "
                                        "mounts: ['/data:/data:ro'], env: [WANDB_MODE]}"]))


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_golden_container(runtime, launcher, tmp_path):
    text = _render_container(runtime, launcher)
    path = os.path.join(GOLDEN, f"container-{runtime}-{launcher}.sbatch")
    if os.environ.get("UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(text)
    assert text == open(path).read(), f"{path} differs; if the change is intended run `make golden`"
    script = tmp_path / "s.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    # the monitor never runs in the container; the rank program always does
    monitor = [line for line in text.splitlines() if "hpclaunch.monitors" in line]
    assert monitor and not any("hl_ctr" in line or "nvcr.io" in line for line in monitor)
    if runtime == "pyxis":
        assert "--container-image='nvcr.io#nvidia/pytorch:24.05-py3'" in text and "--container-remap-root" in text
    else:
        assert '"${hl_rank_log[@]}" "${hl_ctr[@]}" "${hl_cmd[@]}"' in text
