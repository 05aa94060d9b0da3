"""Launcher detection is a pure function of the environment."""
import subprocess
import sys

import pytest

from hpclaunch.train_entry.distenv import (DistEnvError, detect, first_host_of_nodelist, port_from_job_id,
                                           resolve_master, slurm_tasks_on_node)


def test_single_process():
    d = detect({})
    assert (d.launcher, d.rank, d.local_rank, d.world_size, d.distributed) == ("single", 0, 0, 1, False)


def test_torchrun():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "MASTER_ADDR": "n1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x",
           # torchrun inside an srun step: torchrun's variables win
           "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0"}
    d = detect(env)
    assert (d.launcher, d.rank, d.local_rank, d.world_size, d.local_world_size, d.node_rank) == \
        ("torchrun", 3, 1, 4, 2, 1)
    assert (d.master_addr, d.master_port) == ("n1", 29500)


def test_srun_step():
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NODEID": "2",
           "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x4)", "SLURM_JOB_NODELIST": "gpu[01-04]"}
    d = detect(env)
    assert (d.launcher, d.rank, d.local_rank, d.world_size, d.local_world_size, d.node_rank) == \
        ("srun", 5, 1, 8, 2, 2)


def test_slurm_batch_shell_is_not_a_rank():
    # the batch script itself has SLURM_PROCID=0 and SLURM_NTASKS=8 but no step id
    d = detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "7"})
    assert d.launcher == "single" and d.world_size == 1


def test_open_mpi_wins_over_slurm_allocation():
    env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "batch"}
    d = detect(env)
    assert (d.launcher, d.rank, d.local_rank, d.world_size, d.local_world_size, d.node_rank) == \
        ("mpi", 2, 0, 4, 2, 1)


def test_mpich_hydra():
    d = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (d.launcher, d.rank, d.local_rank, d.world_size) == ("mpi", 1, 1, 2)


def test_horovodrun_gloo():
    env = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
           "HOROVOD_CROSS_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1"}
    d = detect(env)
    assert (d.launcher, d.rank, d.local_rank, d.world_size, d.local_world_size) == ("horovod", 1, 1, 4, 2)
    assert d.distributed


def test_horovod_over_mpirun_via_hint():
    env = {"HPCLAUNCH_LAUNCHER": "horovod", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    d = detect(env)
    assert (d.launcher, d.rank, d.world_size, d.local_rank) == ("horovod", 3, 4, 1)


def test_bad_values_fail_clearly():
    with pytest.raises(DistEnvError, match="RANK='x'"):
        detect({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(DistEnvError, match="outside world size"):
        detect({"RANK": "2", "WORLD_SIZE": "2"})


@pytest.mark.parametrize("spec,node,expected", [("2(x3),1", 0, 2), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1),
                                                ("4", 0, 4), ("", 0, None), ("2(x2)", 5, None)])
def test_tasks_per_node(spec, node, expected):
    assert slurm_tasks_on_node(spec, node) == expected


def test_master_precedence():
    assert resolve_master({"MASTER_ADDR": "a", "MASTER_PORT": "1", "HPCLAUNCH_MASTER_ADDR": "b",
                           "HPCLAUNCH_MASTER_PORT": "2"}) == ("a", 1)
    assert resolve_master({"HPCLAUNCH_MASTER_ADDR": "b", "HPCLAUNCH_MASTER_PORT": "2"}) == ("b", 2)


def test_master_from_scontrol():
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="gpu07\ngpu08\n", stderr="")

    addr, port = resolve_master({"SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456"}, run=fake_run)
    assert addr == "gpu07" and calls == [["scontrol", "show", "hostnames", "gpu[07-08]"]]
    assert port == port_from_job_id("123456") and 20000 <= port < 40000
    assert port_from_job_id("123456") != port_from_job_id("124456")   # no aliasing every 1000 ids


def test_master_without_scontrol_parses_nodelist():
    def no_scontrol(cmd, **kw):
        raise FileNotFoundError("scontrol")

    assert resolve_master({"SLURM_JOB_NODELIST": "cn[003-010,12],gpu1", "SLURM_JOB_ID": "9"},
                          run=no_scontrol)[0] == "cn003"
    assert first_host_of_nodelist("single-host") == "single-host"


def test_no_master_is_a_clear_error():
    with pytest.raises(DistEnvError, match="MASTER_ADDR"):
        resolve_master({})


def test_device_binding_and_mismatch():
    from hpclaunch.train_entry.dist_init import DeviceMismatchError, pick_device

    d = detect({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    assert pick_device(d, {}, cuda_count=0) == "cpu"
    assert pick_device(d, {}, cuda_count=2) == "cuda:1"
    assert pick_device(d, {"CUDA_VISIBLE_DEVICES": "3"}, cuda_count=1) == "cuda:0"   # srun --gpus-per-task
    d3 = detect({"RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3"})
    with pytest.raises(DeviceMismatchError, match="local rank 2 of 3 ranks on this node, but only 2 GPU"):
        pick_device(d3, {"CUDA_VISIBLE_DEVICES": "0,1"}, cuda_count=2)


def test_light_modules_do_not_import_torch():
    code = ("import sys, hpclaunch, hpclaunch.train_entry, hpclaunch.train_entry.distenv, "
            "hpclaunch.train_entry.checkpoint, hpclaunch.train_entry.config, hpclaunch.train_entry.signals, "
            "hpclaunch.train_entry.metrics; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
