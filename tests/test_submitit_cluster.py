"""Python callables through submitit with a profile's settings, on the real Slurm test cluster."""
import json
import os
import socket
import sys
import time

import pytest

pytestmark = pytest.mark.cluster

# The job's Python cannot import this test module (tests/ is not a package on its path): send the
# functions below by value, as a user's notebook or script functions would need too.
import cloudpickle  # noqa: E402  (submitit's own dependency)
from hlcli import hl_out as hl

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add(a, b):
    return a + b


def where_am_i():
    import submitit
    env = submitit.JobEnvironment()
    return env.global_rank, env.num_tasks, socket.gethostname()


def wait_final(job_id, timeout=60):
    deadline = time.time() + timeout
    while True:
        st = json.loads(hl("status", job_id, "--json"))
        if st["state"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") or time.time() > deadline:
            return st
        time.sleep(0.5)


def test_function_result_through_the_cluster_and_registry(slurm, hpc_home, tmp_path, monkeypatch):
    from hpclaunch.runs.functions import submit_function
    monkeypatch.chdir(tmp_path)
    job = submit_function(add, 2, 3, profile="testcluster", nodes=1, tasks_per_node=1, time="00:05:00")
    assert job.result() == 5
    folder = str(job.paths.folder)
    # a fresh folder per call, under the profile's runs root, with the job id in it
    assert folder.startswith(str(tmp_path / "runs" / "submitit-")) and folder.endswith(f"/{job.job_id}")
    script = open(job.paths.submission_file).read()
    for line in ("#SBATCH --partition=debug", "#SBATCH --mem=1000M", "#SBATCH --time=5",
                 "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "export OMP_NUM_THREADS=1"):
        assert line in script, (line, script)

    listing = json.loads(hl("list", "--all", "--json"))
    rows = [r for r in listing if r["job_id"] == job.job_id]
    assert len(rows) == 1, listing
    row = rows[0]
    assert row["backend"] == "submitit" and row["run_dir"] == folder and row["name"] == "add"
    assert row["launcher"] == "submitit" and row["profile"] == "testcluster" and row["nodes"] == 1
    st = wait_final(job.job_id)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0, st
    assert job.hpclaunch.record.job_id == job.job_id
    # hpclaunch logs shows submitit's per-task log
    logs = hl("logs", job.job_id)
    assert "==> rank 0" in logs and "_0_log.out" in logs

    # a second call gets its own folder
    again = submit_function(add, 1, 1, profile="testcluster", nodes=1, tasks_per_node=1)
    assert again.result() == 2
    assert os.path.dirname(str(again.paths.folder)) != os.path.dirname(folder)


def test_two_node_function_sees_ranks_on_both_nodes(slurm, hpc_home, tmp_path):
    from hpclaunch.runs.functions import submit_function
    job = submit_function(where_am_i, profile="testcluster", nodes=2, tasks_per_node=1, time="00:05:00",
                          cwd=str(tmp_path))
    results = job.results()
    assert sorted(results) == [(0, 2, "c1"), (1, 2, "c2")], results
    st = wait_final(job.job_id)
    assert st["state"] == "COMPLETED", st
    listing = json.loads(hl("list", "--all", "--json"))
    assert [r["nodes"] for r in listing if r["job_id"] == job.job_id] == [2]


def test_map_function_is_one_array_in_the_registry(slurm, hpc_home, tmp_path):
    from hpclaunch.runs.functions import map_function
    jobs = map_function(add, [1, 2, 3], [10, 20, 30], profile="testcluster", nodes=1, tasks_per_node=1,
                        cwd=str(tmp_path))
    assert [j.result() for j in jobs] == [11, 22, 33]
    base = jobs[0].job_id.split("_")[0]
    listing = json.loads(hl("list", "--all", "--json"))
    rows = [r for r in listing if r["job_id"] == base]
    assert len(rows) == 1 and rows[0]["array_size"] == 3, listing
    st = wait_final(base)
    assert st["tasks"] == {"COMPLETED": 3}, st


def test_bad_settings_are_one_line_errors_and_queue_nothing(slurm, hpc_home, tmp_path):
    from hpclaunch.common.errors import HpclaunchError
    from hpclaunch.runs.functions import executor, submit_function
    cases = [
        (dict(nodes=17), "executor(nodes=...): resources.nodes: profile 'testcluster' allows at most 16 nodes (17)"),
        (dict(nodes="two"), "executor(nodes=...): resources.nodes: expected an integer"),
        (dict(partition="gpu"), "slurm.partition: profile 'testcluster' allows partitions debug"),
        (dict(time="02:00:00"), "resources.time: profile 'testcluster' allows at most 01:00:00"),
        (dict(tasks_per_node=8), "resources.tasks_per_node: 8 ranks x 1 CPUs per rank"),
        (dict(nodez=2), "executor(nodez=...): unknown setting \u2014 did you mean 'nodes'?"),
        (dict(resources={"gpus": 1}), "resources.gpus: unknown key"),
        # submitit signals every job: a signal due before the start would requeue a plain callable forever
        (dict(time="00:02:00"), "resources.time: submitit signals every job 120 s before its time limit, and "
                                "Slurm may send it up to 60 s earlier: with a time limit of 120 s it can come at the start, which "
                                "submitit takes for a preemption and requeues (120) \u2014 use a time limit of at "
                                "least 180 s (time=\"3\"), or a smaller requeue_grace"),
        (dict(time="00:01:00", max_attempts=1), "submitit signals every job 120 s before"),
        (dict(time="00:01:00", requeue_grace=30), "submitit signals every job 30 s before"),
    ]
    for kw, words in cases:
        with pytest.raises(HpclaunchError) as err:
            executor("testcluster", cwd=str(tmp_path), **kw)
        text = str(err.value)
        assert words in text and len(text.splitlines()) == 1, (kw, text)
    with pytest.raises(HpclaunchError):
        submit_function(add, 1, 2, profile="testcluster", nodes=17, cwd=str(tmp_path))
    assert json.loads(hl("list", "--all", "--json")) == []
    assert not (tmp_path / "runs").exists()


def test_site_dialect_and_requeue_signal(slurm, tmp_path):
    """GPUs in the site's form, setup lines, and the profile's requeue signal reach submitit's sbatch script."""
    from hpclaunch.runs.functions import executor
    prof = tmp_path / "hpc_profiles"
    prof.mkdir()
    (prof / "gressite.yaml").write_text(
        "name: gressite\nextends: testcluster\nnode: {cpus: 4, gpus: 4}\ngpu_request: gres\ngres_name: tesla\n"
        "setup: ['module load cuda/12']\nenv: {NCCL_DEBUG: WARN}\n"
        "defaults: {requeue: {signal: USR1, grace: 150, max_attempts: 5}}\n")
    ex = executor("gressite", cwd=str(tmp_path), nodes=1, tasks_per_node=2, gpus_per_node=2,
                  account="hpclaunch", qos="normal")
    p = ex.hpclaunch_settings.parameters
    assert p["slurm_gres"] == "tesla:2" and "slurm_gpus_per_node" not in p
    assert p["slurm_account"] == "hpclaunch" and p["slurm_qos"] == "normal"
    assert p["slurm_additional_parameters"]["signal"] == "USR1@150"
    assert p["slurm_setup"][0] == "module load cuda/12"
    assert "export NCCL_DEBUG=WARN" in p["slurm_setup"]
    assert "export SUBMITIT_PREEMPT_SIGNAL=USR1" in p["slurm_setup"]
    assert ex.hpclaunch_settings.init == {"slurm_max_num_timeout": 4}
    plain = executor("testcluster", cwd=str(tmp_path), nodes=1, gpus_per_node=0).hpclaunch_settings.parameters
    assert "signal" not in plain.get("slurm_additional_parameters", {})  # submitit's USR2 stays
    assert "slurm_gres" not in plain and "slurm_gpus_per_node" not in plain
