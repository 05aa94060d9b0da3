"""The local backend's Slurm emulation: the environment Slurm would give a one-node job, and no more.

The local backend runs the Slurm backend's batch script on this machine (HPCLAUNCH_LOCAL=1 makes
its `hl_step` start the tasks itself instead of srun). Programs find their place in a job from the
scheduler's variables, and the ones people run under hpclaunch read Slurm's: JAX's and Lightning's
cluster detection, Open MPI's mpirun (the allocation), TensorFlow's task index, hpclaunch's own
train_entry (train_entry/distenv.py) and monitors. So rather than a second set of variables that
every one of them would have to learn, this backend deliberately says what Slurm would: the job
(id, name, node list, task counts, CPUs), each attempt's restart count, a sweep task's array
variables and the GPUs it leased. This module is the one place outside the Slurm backend that
writes those names (tests/layers.py's scheduler-words rule names it).
"""
from __future__ import annotations

from typing import Dict, List


def job_env(job_id: str, name: str, tasks_per_node: int, cpus_per_task: int, submit_dir: str) -> Dict[str, str]:
    """What sbatch sets for a one-node job on "localhost" (and HPCLAUNCH_LOCAL, the script's switch)."""
    node_cpus = str(tasks_per_node * cpus_per_task)
    return {
        "HPCLAUNCH_LOCAL": "1",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": name,
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_NODELIST": "localhost",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS": str(tasks_per_node),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        # sbatch's: Open MPI's mpirun reads the allocation from SLURM_NODELIST and these
        "SLURM_TASKS_PER_NODE": str(tasks_per_node),
        "SLURM_JOB_CPUS_PER_NODE": node_cpus,
        "SLURM_CPUS_ON_NODE": node_cpus,
        "SLURM_CPUS_PER_TASK": str(cpus_per_task),
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_CLUSTER_NAME": "local",
        "SLURM_JOB_PARTITION": "local",
    }


def attempt_env(attempts_before: int) -> Dict[str, str]:
    """An attempt's restart count (the script numbers attempts from it)."""
    return {"SLURM_RESTART_COUNT": str(attempts_before)}


def array_task_env(job_id: str, task: int, size: int) -> Dict[str, str]:
    """One task of a job array of `size` tasks numbered from 0."""
    return {"SLURM_ARRAY_JOB_ID": job_id, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(size),
            "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": str(size - 1)}


def gpu_env(ids: List[str]) -> Dict[str, str]:
    """What Slurm sets for a job's GPUs without device cgroups: the node's own ids."""
    text = ",".join(ids)
    return {"CUDA_VISIBLE_DEVICES": text, "SLURM_JOB_GPUS": text, "SLURM_STEP_GPUS": text,
            "GPU_DEVICE_ORDINAL": text}
