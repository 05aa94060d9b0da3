"""GPU -> rank mapping (the rule documented in monitors/ranks.py and docs/monitor-logs.md)."""

from hpclaunch.monitors.ranks import allocated_gpus, gpu_rank_map, ranks_by_position

DEVS = [(i, f"GPU-aaaa{i}000-0000") for i in range(4)]


def test_one_rank_per_gpu():
    env = {"HPCLAUNCH_TASKS_PER_NODE": "4", "SLURM_NODEID": "2"}
    m = gpu_rank_map(DEVS, env)
    assert m["selected"] == {0: "8", 1: "9", 2: "10", 3: "11"}
    assert m["gpus_from"] == "all NVML devices"


def test_more_ranks_than_gpus_round_robin():
    assert ranks_by_position(2, 4, 1) == [[4, 6], [5, 7]]


def test_fewer_ranks_than_gpus_contiguous_blocks():
    assert ranks_by_position(4, 2, 0) == [[0], [0], [1], [1]]
    assert ranks_by_position(3, 2, 0) == [[0], [0], [1]]


def test_slurm_lists_win_over_cuda_visible_devices():
    env = {"SLURM_STEP_GPUS": "2,3", "SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1",
           "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "1"}
    m = gpu_rank_map(DEVS, env)
    assert m["gpus_from"] == "SLURM_STEP_GPUS"
    assert m["selected"] == {2: "2", 3: "3"}  # GPUs 0 and 1 belong to someone else


def test_uuids_and_prefixes_and_unmatched():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-aaaa3000-0000,GPU-aaaa1,MIG-xyz", "HPCLAUNCH_TASKS_PER_NODE": "2"}
    m = gpu_rank_map(DEVS, env)
    assert m["selected"] == {3: "0", 1: "1"}
    assert m["unmatched"] == ["MIG-xyz"]


def test_unknown_tasks_per_node_leaves_ranks_empty():
    m = gpu_rank_map(DEVS, {"SLURM_JOB_GPUS": "0"})
    assert m["selected"] == {0: ""} and m["tasks_per_node"] is None


def test_override_and_all_gpus():
    m = gpu_rank_map(DEVS, {"SLURM_JOB_GPUS": "0"}, gpus="1", tasks_per_node=1, node_id=5, all_gpus=True)
    assert m["selected"] == {0: "", 1: "5", 2: "", 3: ""}
    assert allocated_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == (None, None)
    assert allocated_gpus({"SLURM_NTASKS_PER_NODE": "4(x2)"}) == (None, None)


def test_slurm_ntasks_per_node_with_repeat_suffix():
    m = gpu_rank_map(DEVS[:2], {"SLURM_NTASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "2"})
    assert m["selected"] == {0: "4", 1: "5"}
