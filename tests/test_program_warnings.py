"""validate and submit warn when an Accelerate program would run as N independent worlds of one
(issue 45, item 8): under launcher: srun (no RANK/WORLD_SIZE/LOCAL_RANK), or torchrun on CPU nodes
without ACCELERATE_USE_CPU. The job file and the script are real files; nothing runs."""
import pytest

from hpclaunch.spec.program_warnings import program_warnings

QUICK_TOUR = """import torch
from accelerate import Accelerator

accelerator = Accelerator()
"""


def doc(launcher, command, nodes=2, tasks=1, gpus=0, env=None):
    return {"launcher": launcher, "command": command, "env": env or {}, "workdir": None,
            "resources": {"nodes": nodes, "tasks_per_node": tasks, "gpus_per_node": gpus}}


@pytest.mark.parametrize("job,says", [
    (doc("srun", ["python", "tour.py"]), "tour.py imports accelerate, which reads RANK, WORLD_SIZE and LOCAL_RANK"),
    (doc("srun", ["python", "tour.py"], gpus=4), "launcher: srun sets none of them"),
    (doc("torchrun", ["python", "tour.py"]), "ignores torchrun's world on CPU nodes unless ACCELERATE_USE_CPU is set"),
    (doc("srun", ["accelerate", "launch", "tour.py"]), "each rank starts its own `accelerate launch`"),
])
def test_accelerate_programs_that_would_train_alone_are_warned(tmp_path, job, says):
    (tmp_path / "tour.py").write_text(QUICK_TOUR)
    (line,) = program_warnings(job, str(tmp_path))
    assert line.startswith("warning: command: ") and says in line, line
    assert "independent trainings" in line or "would train alone" in line
    if job["launcher"] == "srun" and not job["resources"]["gpus_per_node"]:
        assert 'ACCELERATE_USE_CPU: "1"' in line


@pytest.mark.parametrize("job", [
    doc("torchrun", ["python", "tour.py"], gpus=2),                                  # torchrun sets the world
    doc("torchrun", ["python", "tour.py"], env={"ACCELERATE_USE_CPU": "1"}),
    doc("srun", ["python", "tour.py"], nodes=1, tasks=1),                            # one rank: one world
    doc("srun", ["python", "plain.py"]),                                              # no accelerate
    doc("mpi", ["python", "tour.py"]),
    doc("srun", ["python", "missing.py"]),
])
def test_no_warning_where_the_world_is_right_or_accelerate_is_not_seen(tmp_path, job):
    (tmp_path / "tour.py").write_text(QUICK_TOUR)
    (tmp_path / "plain.py").write_text("import torch\n# accelerate is mentioned, not imported\n")
    assert program_warnings(job, str(tmp_path)) == []


def test_validate_says_it(tmp_path, run_cli, monkeypatch):
    (tmp_path / "tour.py").write_text(QUICK_TOUR)
    (tmp_path / "job.yaml").write_text("name: tour\nprofile: local\nlauncher: srun\ncommand: [python, tour.py]\n"
                                       "resources: {nodes: 1, tasks_per_node: 2, cpus_per_task: 1}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", "job.yaml")
    assert code == 0 and "valid" in out and "tour.py imports accelerate" in err, err


ALONE = """import socket, sys, time
held = socket.socketpair() if sys.argv[1] == "talk" else None   # a rank of a world holds sockets all along
time.sleep(12)
"""


@pytest.mark.parametrize("mode,warned", [("alone", True), ("talk", False)])
def test_wait_warns_when_the_ranks_of_a_completed_job_never_held_a_socket(tmp_path, hpc_home, mode, warned):
    """The runtime side: the monitor's per-rank rows saw each rank running and holding no socket, so
    the ranks never talked to each other, whatever program it was. Two real ranks on the local backend."""
    import sys

    from hlcli import hl

    (tmp_path / "prog.py").write_text(ALONE)
    (tmp_path / "job.yaml").write_text(f"name: {mode}\nprofile: local\nlauncher: srun\n"
                                       f"command: [{sys.executable}, prog.py, {mode}]\n"
                                       "resources: {nodes: 1, tasks_per_node: 2, cpus_per_task: 1}\n"
                                       "monitor: {interval: 1}\nrequeue: {max_attempts: 1}\n")
    proc = hl("submit", "job.yaml", "--backend", "local", "--wait", cwd=str(tmp_path), timeout=300)
    assert ("never held a socket while they ran" in proc.stderr) is warned, proc.stderr
