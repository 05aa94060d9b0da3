"""Preflight: a request checked against the live cluster before anything is queued.

Partition (exists, UP, MaxTime, MaxNodes), node shape (CPUs, memory, GPUs of the nodes that
could take it), account and QOS associations. Every problem is one line naming the layer the
value came from (`sources`), as validation's are. Reads only the plan.
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from hpclaunch.common.errors import InvalidInput, Problem
from hpclaunch.launchers.backends import slurmcli
from hpclaunch.launchers.plan import Plan
from hpclaunch.spec.units import format_time, parse_mem_mib

Bad = Callable[[str, str, object, str], None]


def check_request(plan: Plan, sources, cluster: str, partitions: list[dict], nodes: list[dict],
                  association: Optional[Callable[[], Optional[tuple[set, set]]]]) -> None:
    """Raise InvalidInput with one line per problem. `association` returns (accounts, qos) of the
    user, or None when it cannot tell; it is called only when the request names either."""
    problems: list[Problem] = []

    def bad(path: str, message: str, value: object, fix: str) -> None:
        problems.append(Problem(sources.of(path), path, message, value, fix))

    part = _partition(plan, partitions, cluster, bad)
    if part is None:
        raise InvalidInput(problems)
    pname = part.get("PartitionName", "?")
    if part.get("State", "UP") != "UP":
        bad("slurm.partition", f"partition '{pname}' is {part.get('State')}", pname,
            "pick a partition that is UP (see `sinfo`)")
    limit = slurmcli.parse_time_limit(part.get("MaxTime", ""))
    if limit is not None and plan.time_s > limit:
        bad("resources.time", f"over partition '{pname}''s MaxTime of {format_time(limit)}",
            format_time(plan.time_s), f"use at most \"{format_time(limit)}\" or another partition")
    _check_nodes(part, plan, nodes, bad)
    if plan.placement.account or plan.placement.qos:
        found = association() if association else None
        if found is not None:
            accounts, qos = found
            if plan.placement.account and plan.placement.account not in accounts:
                bad("slurm.account", f"you have no association with account '{plan.placement.account}'",
                    plan.placement.account, f"use one of: {', '.join(sorted(accounts)) or '(none)'}")
            if plan.placement.qos and qos and plan.placement.qos not in qos:
                bad("slurm.qos", "this QOS is not allowed for you", plan.placement.qos, f"use one of: {', '.join(sorted(qos))}")
    if problems:
        raise InvalidInput(problems)


def _partition(plan: Plan, parts: list[dict], cluster: str, bad: Bad) -> Optional[dict]:
    names = [p.get("PartitionName", "") for p in parts]
    if plan.placement.partition is None:
        default = [p for p in parts if p.get("Default") == "YES"]
        if not default:
            bad("slurm.partition", "this cluster has no default partition", None,
                f"set slurm.partition to one of: {', '.join(names)}")
            return None
        return default[0]
    match = [p for p in parts if p.get("PartitionName") == plan.placement.partition]
    if not match:
        import difflib  # only to word an error: not on every submit's path
        close = difflib.get_close_matches(plan.placement.partition, names, n=1)
        bad("slurm.partition", f"no such partition on cluster '{cluster}'", plan.placement.partition,
            (f"did you mean '{close[0]}'? " if close else "") + f"partitions: {', '.join(names)}")
        return None
    return match[0]


def node_gpus(node: dict) -> int:
    """GPUs of a node record's Gres (`gpu:4`, `gpu:a100:4(S:0-1)`, several items)."""
    total = 0
    # The socket binding holds colons and may hold commas ("(S:0-1)", "(S:0,2)"): drop it first.
    for item in re.sub(r"\([^)]*\)", "", node.get("Gres", "")).split(","):
        bits = item.split(":")
        count = bits[-1]
        if bits[0] == "gpu" and count.isdigit():
            total += int(count)
    return total


def _check_nodes(part: dict, plan: Plan, all_nodes: list[dict], bad: Bad) -> None:
    nodelist = part.get("Nodes", "")
    if not nodelist or nodelist == "(null)":
        return
    pname = part.get("PartitionName")
    # Node records name their partitions: no `scontrol show hostnames` round trip needed.
    nodes = [n for n in all_nodes if pname in n.get("Partitions", "").split(",")]
    max_nodes = part.get("MaxNodes", "UNLIMITED")
    cap = len(nodes) if max_nodes in ("UNLIMITED", "") else min(len(nodes), int(max_nodes))
    if plan.nodes > cap:
        bad("resources.nodes", f"partition '{pname}' has {cap} node(s) a job can use", plan.nodes,
            f"use at most {cap}")
        return
    cpus = plan.cpus_per_task * plan.tasks_per_node
    mem = parse_mem_mib(plan.mem) if plan.mem else 0
    gpus = plan.gpus_per_node
    fit = [n for n in nodes if int(n.get("CPUTot", "0")) >= cpus
           and float(n.get("RealMemory", "0")) >= mem and node_gpus(n) >= gpus]
    if len(fit) >= plan.nodes or not nodes:
        return
    most_cpu = max(int(n.get("CPUTot", "0")) for n in nodes)
    most_mem = max(float(n.get("RealMemory", "0")) for n in nodes)
    most_gpu = max(node_gpus(n) for n in nodes)
    if cpus > most_cpu:
        bad("resources.cpus_per_task", f"needs {cpus} CPUs per node; nodes of partition '{pname}' have "
            f"at most {most_cpu}", plan.cpus_per_task, "lower tasks_per_node x cpus_per_task, or use more nodes")
    elif mem > most_mem:
        bad("resources.mem", f"nodes of partition '{pname}' have at most {most_mem:.0f} MB", plan.mem,
            f"ask for at most {int(most_mem)}M")
    elif gpus > most_gpu:
        bad("resources.gpus_per_node", f"nodes of partition '{pname}' have at most {most_gpu} GPUs", gpus,
            f"use at most {most_gpu}")
    else:
        bad("resources.nodes", f"only {len(fit)} node(s) of partition '{pname}' fit the request", plan.nodes,
            f"use at most {len(fit)} nodes or ask for less per node")


def parse_associations(text: str) -> tuple[set, set]:
    """`sacctmgr -nP show assoc user=U format=account,qos` -> (accounts, qos names)."""
    accounts, qos = set(), set()
    for cols in slurmcli.columns(text):
        accounts.add(cols[0])
        for q in (cols[1] if len(cols) > 1 else "").split(","):
            if q:
                qos.add(q)
    return accounts, qos
