"""The Slurm backend: preflight against the live cluster, sbatch, squeue/sacct/scontrol, scancel.

Submission holds the job (`sbatch --hold`) until its run directory exists and the registry has
it, then releases it: Slurm opens the job's --output file in that directory, and a job that
starts before it exists fails with no log at all (hydra#2100).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Optional

from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem
from hpclaunch.spec.units import parse_mem_mib, parse_time_seconds

from hpclaunch.launchers.backends import slurmcli
from hpclaunch.launchers.request import BatchRequest


@dataclass
class JobStatus:
    state: str                      # Slurm's state word (PENDING, RUNNING, COMPLETED, ...)
    exit_code: Optional[int] = None
    elapsed: str = ""
    nodes: str = ""
    reason: str = ""
    attempts: int = 1
    source: str = ""                # squeue | sacct | scontrol | local
    tasks: dict = field(default_factory=dict)   # array: state -> count

    @property
    def final(self) -> bool:
        from hpclaunch.runs.registry import FINAL_STATES
        if self.tasks:
            return all(s in FINAL_STATES for s in self.tasks)
        return self.state in FINAL_STATES


def submit_env() -> dict:
    """The environment sbatch exports to the job: scrubbed of an enclosing job's settings, plus
    the interpreter and PATH of this hpclaunch, so the job runs in the same Python environment."""
    bindir = os.path.dirname(sys.executable)
    env = slurmcli.clean_env(extra={"HPCLAUNCH_PYTHON": sys.executable})
    path = env.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        env["PATH"] = bindir + (os.pathsep + path if path else "")
    return env


class SlurmBackend:
    name = "slurm"

    def __init__(self) -> None:
        self._config: Optional[dict[str, str]] = None
        self._pending: dict[str, slurmcli.Pending] = {}

    # --- cluster facts ----------------------------------------------------------------------------

    def prefetch(self, preflight: bool = True) -> None:
        """Start the queries a submission needs, all at once, while the caller loads and renders
        the job: three controller round trips then cost about one."""
        self._pending.setdefault("config", slurmcli.Pending(["scontrol", "show", "config"]))
        if preflight:
            for kind in ("partition", "node"):
                self._pending.setdefault(kind, slurmcli.Pending(slurmcli.show_cmd(kind)))

    def _show(self, kind: str) -> list[dict[str, str]]:
        return slurmcli.show(kind, pending=self._pending.pop(kind, None))

    def config(self) -> dict[str, str]:
        if self._config is None:
            pending = self._pending.pop("config", None)
            proc = pending.result() if pending else slurmcli.run(["scontrol", "show", "config"])
            conf = {}
            for line in proc.stdout.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    conf[key.strip()] = value.strip()
            self._config = conf
        return self._config

    def cluster_name(self) -> str:
        return self.config().get("ClusterName", "slurm")

    def max_array_size(self) -> int:
        try:
            return int(self.config().get("MaxArraySize", "1001"))
        except ValueError:
            return 1001

    def accounting(self) -> bool:
        return "none" not in self.config().get("AccountingStorageType", "none")

    # --- preflight ------------------------------------------------------------------------------

    def preflight(self, resolved, request: BatchRequest, script: str, sbatch_args: list[str],
                  test_only: bool = False) -> Optional[str]:
        """Check the request against the live cluster; raise InvalidInput with one line per problem.

        `sbatch --test-only` runs only when asked (`submit --test-only`): a real submission is
        made held, and Slurm's checks of a held sbatch are those of --test-only, so a refused
        request is queued no more than with --test-only, one controller round trip sooner.
        Returns --test-only's verdict (Slurm's estimate of when and where the job would start)."""
        from hpclaunch.spec.yamlio import display_path
        source = display_path(resolved.job_path)
        problems: list[Problem] = []

        def bad(path: str, message: str, value: object, fix: str) -> None:
            problems.append(Problem(resolved.origins.get(path, source), path, message, value, fix))

        job = resolved.job
        parts = self._show("partition")
        names = [p.get("PartitionName", "") for p in parts]
        want = job.slurm.partition
        if want is None:
            default = [p for p in parts if p.get("Default") == "YES"]
            if not default:
                bad("slurm.partition", "this cluster has no default partition", None,
                    f"set slurm.partition to one of: {', '.join(names)}")
                raise InvalidInput(problems)
            part = default[0]
        else:
            match = [p for p in parts if p.get("PartitionName") == want]
            if not match:
                import difflib
                close = difflib.get_close_matches(want, names, n=1)
                bad("slurm.partition", f"no such partition on cluster '{self.cluster_name()}'", want,
                    (f"did you mean '{close[0]}'? " if close else "") + f"partitions: {', '.join(names)}")
                raise InvalidInput(problems)
            part = match[0]
        pname = part.get("PartitionName", "?")
        if part.get("State", "UP") != "UP":
            bad("slurm.partition", f"partition '{pname}' is {part.get('State')}", pname,
                "pick a partition that is UP (see `sinfo`)")
        limit = slurmcli.parse_time_limit(part.get("MaxTime", ""))
        seconds = parse_time_seconds(job.resources.time)
        if limit is not None and seconds > limit:
            from hpclaunch.spec.units import format_time
            bad("resources.time", f"over partition '{pname}''s MaxTime of {format_time(limit)}",
                job.resources.time, f"use at most \"{format_time(limit)}\" or another partition")
        self._check_nodes(part, request, job, bad)
        if self.accounting() and (job.slurm.account or job.slurm.qos):
            self._check_association(job, bad)
        if problems:
            raise InvalidInput(problems)
        if not test_only:
            return None
        proc = slurmcli.run(["sbatch", "--test-only"] + sbatch_args, input=script, env=submit_env(), check=False)
        if proc.returncode != 0:
            message = slurmcli.first_line(proc.stderr or proc.stdout)
            raise HpclaunchError(f"{source}: sbatch --test-only refused the job: {message} "
                                 "\u2014 nothing was queued; change the request or the partition")
        return slurmcli.first_line(proc.stderr or proc.stdout)

    def _check_nodes(self, part: dict, request: BatchRequest, job, bad) -> None:
        nodelist = part.get("Nodes", "")
        if not nodelist or nodelist == "(null)":
            return
        pname = part.get("PartitionName")
        # Node records name their partitions: no `scontrol show hostnames` round trip needed.
        nodes = [n for n in self._show("node") if pname in n.get("Partitions", "").split(",")]
        max_nodes = part.get("MaxNodes", "UNLIMITED")
        total = len(nodes)
        cap = total if max_nodes in ("UNLIMITED", "") else min(total, int(max_nodes))
        if job.resources.nodes > cap:
            bad("resources.nodes", f"partition '{pname}' has {cap} node(s) a job can use", job.resources.nodes,
                f"use at most {cap}")
            return
        cpus = request.cpus_per_task * request.tasks_per_node
        mem = parse_mem_mib(job.resources.mem) if job.resources.mem else 0
        gpus = job.resources.gpus_per_node

        def node_gpus(n: dict) -> int:
            total_g = 0
            for item in n.get("Gres", "").split(","):
                bits = item.split(":")
                if bits[0] == "gpu" and bits[-1].split("(")[0].isdigit():
                    total_g += int(bits[-1].split("(")[0])
            return total_g

        fit = [n for n in nodes if int(n.get("CPUTot", "0")) >= cpus
               and float(n.get("RealMemory", "0")) >= mem and node_gpus(n) >= gpus]
        if len(fit) < job.resources.nodes and nodes:
            most_cpu = max(int(n.get("CPUTot", "0")) for n in nodes)
            most_mem = max(float(n.get("RealMemory", "0")) for n in nodes)
            most_gpu = max(node_gpus(n) for n in nodes)
            if cpus > most_cpu:
                bad("resources.cpus_per_task", f"needs {cpus} CPUs per node; nodes of partition '{pname}' have "
                    f"at most {most_cpu}", job.resources.cpus_per_task,
                    "lower tasks_per_node x cpus_per_task, or use more nodes")
            elif mem > most_mem:
                bad("resources.mem", f"nodes of partition '{pname}' have at most {most_mem:.0f} MB",
                    job.resources.mem, f"ask for at most {int(most_mem)}M")
            elif gpus > most_gpu:
                bad("resources.gpus_per_node", f"nodes of partition '{pname}' have at most {most_gpu} GPUs", gpus,
                    f"use at most {most_gpu}")
            else:
                bad("resources.nodes", f"only {len(fit)} node(s) of partition '{pname}' fit the request",
                    job.resources.nodes, f"use at most {len(fit)} nodes or ask for less per node")

    def _check_association(self, job, bad) -> None:
        from hpclaunch.runs.registry import _user
        proc = slurmcli.run(["sacctmgr", "-nP", "show", "assoc", f"user={_user()}", "format=account,qos"],
                            check=False)
        if proc.returncode != 0:
            return  # cannot tell; sbatch still checks the association when it queues the job
        accounts, qos = set(), set()
        for cols in slurmcli.columns(proc.stdout):
            accounts.add(cols[0])
            for q in (cols[1] if len(cols) > 1 else "").split(","):
                if q:
                    qos.add(q)
        if job.slurm.account and job.slurm.account not in accounts:
            bad("slurm.account", f"you have no association with account '{job.slurm.account}'",
                job.slurm.account, f"use one of: {', '.join(sorted(accounts)) or '(none)'}")
        if job.slurm.qos and qos and job.slurm.qos not in qos:
            bad("slurm.qos", "this QOS is not allowed for you", job.slurm.qos,
                f"use one of: {', '.join(sorted(qos))}")

    # --- submit / release / cancel ----------------------------------------------------------------

    def sbatch(self, script: str, args: list[str], cwd: str) -> str:
        proc = slurmcli.run(["sbatch", "--parsable"] + args, input=script, env=submit_env())
        job_id = proc.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise HpclaunchError(f"sbatch printed no job id: {proc.stdout.strip()!r} \u2014 check the cluster")
        return job_id

    def release(self, job_id: str) -> None:
        slurmcli.run(["scontrol", "release", job_id])

    def cancel(self, job_id: str) -> None:
        slurmcli.run(["scancel", job_id])

    def down_nodes(self, nodelist: str) -> list[str]:
        """Nodes of `nodelist` that Slurm now reports DOWN, DRAIN(ED), FAIL or NOT_RESPONDING."""
        if not nodelist or nodelist in ("None", "(null)"):
            return []
        members = set(slurmcli.hostnames(nodelist))
        bad = []
        for rec in slurmcli.show("node"):
            if rec.get("NodeName") in members:
                state = rec.get("State", "")
                if any(w in state for w in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING")):
                    bad.append(rec["NodeName"])
        return sorted(bad)

    # --- status ---------------------------------------------------------------------------------

    def status(self, job_id: str, array: bool = False) -> JobStatus:
        proc = slurmcli.run(["squeue", "-h", "-r", "-j", job_id, "-o", "%i|%T|%M|%N|%r"], check=False)
        rows = list(slurmcli.columns(proc.stdout)) if proc.returncode == 0 else []
        if array:
            return self._array_status(job_id, rows)
        if rows:
            jid, state, elapsed, nodes, reason = (rows[0] + [""] * 5)[:5]
            return JobStatus(state, None, elapsed, nodes, reason, self._restarts(job_id) + 1, "squeue")
        done = self._sacct(job_id)
        if done is not None:
            return done
        recs = slurmcli.show("job", job_id)
        if recs:
            r = recs[0]
            code = r.get("ExitCode", "0:0").split(":")[0]
            return JobStatus(r.get("JobState", "UNKNOWN"), int(code) if code.isdigit() else None,
                             r.get("RunTime", ""), r.get("NodeList", ""), r.get("Reason", ""),
                             int(r.get("Restarts", "0") or 0) + 1, "scontrol")
        return JobStatus("UNKNOWN", source="none")

    def _array_status(self, job_id: str, squeue_rows: list[list[str]]) -> JobStatus:
        """Counts per state over an array's tasks: finished ones from sacct (or scontrol), live ones
        from squeue, which wins for a task both know."""
        per: dict[str, str] = {}
        proc = slurmcli.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State"], check=False)
        if proc.returncode == 0:
            for cols in slurmcli.columns(proc.stdout):
                if len(cols) >= 2 and "[" not in cols[0]:
                    per[cols[0]] = cols[1].split()[0]
        else:
            for rec in slurmcli.show("job", job_id):
                if rec.get("ArrayTaskId", "").isdigit():
                    per[f"{rec.get('ArrayJobId')}_{rec['ArrayTaskId']}"] = rec.get("JobState", "UNKNOWN")
        for row in squeue_rows:
            per[row[0]] = row[1]
        counts: dict[str, int] = {}
        for state in per.values():
            counts[state] = counts.get(state, 0) + 1
        return JobStatus("", tasks=counts, source="squeue+sacct")

    def _restarts(self, job_id: str) -> int:
        recs = slurmcli.show("job", job_id)
        try:
            return int(recs[0].get("Restarts", "0")) if recs else 0
        except ValueError:
            return 0

    def _sacct(self, job_id: str) -> Optional[JobStatus]:
        cmd = ["sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", "JobID,State,ExitCode,Elapsed,NodeList"]
        proc = slurmcli.run(cmd, check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        rows = [r for r in slurmcli.columns(proc.stdout) if len(r) >= 5 and r[0] == job_id]
        if not rows:
            return None
        jid, state, code, elapsed, nodes = rows[-1][:5]
        exit_code = code.split(":")[0]
        return JobStatus(state.split()[0], int(exit_code) if exit_code.isdigit() else None, elapsed, nodes, "",
                         len(rows), "sacct")
