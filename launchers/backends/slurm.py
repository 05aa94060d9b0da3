"""The Slurm backend: preflight against the live cluster, sbatch --hold, release, status, scancel.

Submission holds the job (`sbatch --hold`) until its run directory exists and the registry has
it, then releases it: Slurm opens the job's --output file in that directory, and a job that
starts before it exists fails with no log at all (hydra#2100).

The cluster facts preflight reads come from the user cache when a submission made within the
last minutes asked for them (slurm_facts.py); a request they would refuse is checked again live.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

from hpclaunch import runtime
from hpclaunch.common.errors import HpclaunchError, InvalidInput
from hpclaunch.common.identity import current_user
from hpclaunch.launchers.backends import slurm_facts, slurm_status, slurmcli
from hpclaunch.launchers.backends.base import Capability, JobRef, JobStatus, NodeFailureAware, Rerun, State

if TYPE_CHECKING:
    from hpclaunch.launchers.backends.slurm_script import SlurmRequest


def scripts():
    """The submission side (slurm_script: the plan and the job file's models, a third of a
    command's start-up), loaded by what submits: `status`, `list` and the dashboard only ask."""
    from hpclaunch.launchers.backends import slurm_script
    return slurm_script


def submit_env() -> dict:
    """The environment sbatch exports to the job: scrubbed of an enclosing job's settings, plus
    the interpreter and PATH of this hpclaunch, so the job runs in the same Python environment, and
    its job runtime, which the script then sources without starting Python to find it."""
    bindir = os.path.dirname(sys.executable)
    env = slurmcli.clean_env(extra={"HPCLAUNCH_PYTHON": sys.executable, "HPCLAUNCH_RUNTIME": runtime.path()})
    path = env.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        env["PATH"] = bindir + (os.pathsep + path if path else "")
    return env


class SlurmBackend(NodeFailureAware):
    name = "slurm"
    capabilities = frozenset({Capability.JOB_FILES, Capability.DEPENDENCIES, Capability.NODE_FAILURES})

    @classmethod
    def unavailable(cls) -> Optional[str]:
        if not slurmcli.available():
            return "--backend slurm: sbatch is not on PATH \u2014 run on a login node, or use --backend local"
        return None

    @classmethod
    def detected(cls) -> bool:
        """A cluster is configured here: sbatch on PATH and a slurm.conf."""
        return bool(shutil.which("sbatch") and (os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")))

    def __init__(self) -> None:
        self._config: Optional[dict[str, str]] = None
        self._pending: dict[str, slurmcli.Pending] = {}
        self._cached: Optional[dict[str, str]] = None  # {kind: scontrol's text} from slurm_facts
        self._live: dict[str, str] = {}  # what this process asked the controller, for slurm_facts

    # --- cluster facts ----------------------------------------------------------------------------

    def prefetch(self, preflight: bool = True) -> None:
        """The cluster facts a submission needs: from the cache when it has them fresh, else the
        queries started all at once, while the caller loads and renders the job (three controller
        round trips then cost about one)."""
        if self._cached is None and not self._pending and self._config is None:
            self._cached = slurm_facts.load()
        if self._cached is None:
            self._ask(preflight)

    def _ask(self, preflight: bool) -> None:
        self._pending.setdefault("config", slurmcli.Pending(["scontrol", "show", "config"]))
        if preflight:
            for kind in ("partition", "node"):
                self._pending.setdefault(kind, slurmcli.Pending(slurmcli.show_cmd(kind)))

    def _answer(self, kind: str, text: str) -> str:
        """A live answer, kept for the cache once all three are in."""
        self._live[kind] = text
        if len(self._live) == len(slurm_facts.KINDS):
            slurm_facts.store(self._live)
        return text

    def _show(self, kind: str) -> list[dict[str, str]]:
        if self._cached is not None:
            return slurmcli.parse_records(self._cached[kind])
        proc = (self._pending.pop(kind, None) or slurmcli.Pending(slurmcli.show_cmd(kind))).result(check=False)
        return slurmcli.parse_records(self._answer(kind, proc.stdout)) if proc.returncode == 0 else []

    def config(self) -> dict[str, str]:
        if self._config is None:
            if self._cached is not None:
                text = self._cached["config"]
            else:
                pending = self._pending.pop("config", None)
                proc = pending.result() if pending else slurmcli.run(["scontrol", "show", "config"])
                text = self._answer("config", proc.stdout)
            self._config = slurmcli.parse_config(text)
        return self._config

    def _forget_cached(self) -> None:
        """The cached facts may be stale: drop them (here and on disk) and ask the controller."""
        if self._cached is not None:
            slurm_facts.forget()
            self._cached, self._config = None, None

    def cluster_name(self) -> str:
        return self.config().get("ClusterName", "slurm")

    def max_array_size(self) -> int:
        try:
            return int(self.config().get("MaxArraySize", "1001"))
        except ValueError:
            return 1001

    def accounting(self) -> bool:
        return "none" not in self.config().get("AccountingStorageType", "none")

    # --- the plan in Slurm's terms ------------------------------------------------------------------

    def prepare(self, plan) -> SlurmRequest:
        return scripts().prepare(plan)

    # --- preflight ------------------------------------------------------------------------------

    def preflight(self, request: SlurmRequest, sources, test_only: bool = False) -> Optional[str]:
        """Check the request against the live cluster; raise InvalidInput with one line per problem.

        `sbatch --test-only` runs only when asked (`submit --test-only`): a real submission is
        made held, and Slurm's checks of a held sbatch are those of --test-only, so a refused
        request is queued no more than with --test-only, one controller round trip sooner.
        Returns --test-only's verdict (Slurm's estimate of when and where the job would start)."""
        self.config()  # a controller that does not answer fails here, with Slurm's message
        plan, script = request.plan, scripts()
        args = script.dependency(plan)
        if plan.array_size:
            first = min(plan.array_size, self.max_array_size())
            args.append(f"--array={script.array_spec(first, plan.parallelism)}")
        try:
            self._check(plan, sources)
        except InvalidInput:
            if self._cached is None:
                raise
            self._forget_cached()  # cached facts never refuse a job: the live cluster's answer does
            self._ask(True)
            self._check(plan, sources)
        if not test_only:
            return None
        proc = slurmcli.run(["sbatch", "--test-only"] + args, input=request.script, env=submit_env(), check=False)
        if proc.returncode != 0:
            message = slurmcli.first_line(proc.stderr or proc.stdout)
            raise HpclaunchError(f"{sources.default}: sbatch --test-only refused the job: {message} "
                                 "\u2014 nothing was queued; change the request or the partition")
        return slurmcli.first_line(proc.stderr or proc.stdout)

    def _check(self, plan, sources) -> None:
        from hpclaunch.launchers.backends.slurm_preflight import check_request   # with the plan: see scripts
        check_request(plan, sources, self.cluster_name(), self._show("partition"), self._show("node"),
                      self._associations if self.accounting() else None)

    def _associations(self) -> Optional[tuple[set, set]]:
        proc = slurmcli.run(["sacctmgr", "-nP", "show", "assoc", f"user={current_user()}", "format=account,qos"],
                            check=False)
        if proc.returncode != 0:
            return None  # cannot tell; sbatch still checks the association when it queues the job
        from hpclaunch.launchers.backends.slurm_preflight import parse_associations
        return parse_associations(proc.stdout)

    # --- queue / release / cancel -----------------------------------------------------------------

    def sbatch(self, script: str, args: list[str], cwd: str) -> str:
        try:
            proc = slurmcli.run(["sbatch", "--parsable"] + args, input=script, env=submit_env(), cwd=cwd)
        except slurmcli.SlurmError:
            self._forget_cached()  # what preflight read from the cache may be why: the next one asks live
            raise
        job_id = proc.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise HpclaunchError(f"sbatch printed no job id: {proc.stdout.strip()!r} \u2014 check the cluster")
        return job_id

    def queue(self, request: SlurmRequest, *, cwd: str, new_id: Optional[Callable[[], str]] = None) -> List[tuple]:
        """Held jobs: one, or for a sweep one array per MaxArraySize chunk. Every chunk is held until
        all are queued, so a sweep is queued whole or not at all (the caller abandons on failure)."""
        plan, script, slurm_script = request.plan, request.script, scripts()
        if not plan.array_size:
            args = slurm_script.dependency(plan) + [f"--output={slurm_script.run_log(plan, cwd)}", "--hold"]
            return [(self.sbatch(script, args, cwd), 0)]
        size = max(1, self.max_array_size())
        n, par = plan.array_size, plan.parallelism
        chunks = [(off, min(size, n - off)) for off in range(0, n, size)]
        ids: List[str] = []
        try:
            for k, (off, count) in enumerate(chunks):
                extra = [f"--array={slurm_script.array_spec(count, par)}",
                         f"--output={slurm_script.sweep_log(plan, cwd, ids[0] if k else '%A')}"]
                chained: tuple = ()
                if k:
                    extra.append(f"--export=ALL,HPCLAUNCH_ARRAY_OFFSET={off},HPCLAUNCH_SWEEP_ID={ids[0]}")
                    if par:  # %parallelism is per array: chained, the chunks never run more than it at once
                        chained = (f"afterany:{ids[-1]}",)
                ids.append(self.sbatch(script, extra + slurm_script.dependency(plan, chained) + ["--hold"], cwd))
        except BaseException:
            self.abandon(ids)
            raise
        return [(job_id, count) for job_id, (_, count) in zip(ids, chunks)]

    def release(self, ref: JobRef, request: Optional[SlurmRequest] = None, *, cwd: str = "") -> None:
        slurmcli.run(["scontrol", "release", ref.job_id])

    def abandon(self, job_ids) -> None:
        for job_id in job_ids:
            try:
                slurmcli.run(["scancel", job_id])
            except Exception:
                pass

    def cancel(self, ref: JobRef) -> None:
        slurmcli.run(["scancel", ref.job_id])

    def resubmit(self, rerun: Rerun, cwd: str) -> str:
        """A held copy of an existing job's script (a node failed under it)."""
        return self.sbatch(rerun.script, scripts().rerun_flags(rerun) + ["--hold"], cwd)

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

    def job_nodes(self, job_id: str) -> str:
        recs = slurmcli.show("job", job_id)
        return recs[0].get("NodeList", "") if recs else ""

    # --- status ---------------------------------------------------------------------------------

    def status(self, ref: JobRef) -> JobStatus:
        return self.statuses([ref])[0]

    def statuses(self, refs: Sequence[JobRef]) -> List[JobStatus]:
        """Every job's state from one squeue call, and one sacct call for those squeue no longer
        lists (controllers rate-limit per-job polling: submitit#1759)."""
        if not refs:
            return []
        ids = [r.job_id for r in refs]
        proc = slurmcli.run(slurm_status.squeue_cmd(ids), check=False)
        live = slurm_status.parse_squeue(proc.stdout) if proc.returncode == 0 else {}
        gone = [r.job_id for r in refs if r.array_size or r.job_id not in live]
        restarts = {r.job_id: self._restarts(r.job_id) for r in refs if not r.array_size and r.job_id in live}
        # A live job that has restarted: sacct -D in the same call tells each earlier attempt's end,
        # cause (REQUEUED, NODE_FAIL, PREEMPTED) and nodes, which squeue no longer shows.
        asked = gone + [j for j, n in restarts.items() if n]
        ended = None
        if asked:
            proc = slurmcli.run(slurm_status.sacct_cmd(asked), check=False)
            ended = slurm_status.parse_sacct(proc.stdout) if proc.returncode == 0 else None
        out = []
        for ref in refs:
            if ref.array_size:
                counts = slurm_status.array_counts(ref.job_id, live, ended, [])
                if sum(counts.values()) < ref.array_size:
                    # sacct may not know tasks that just ended yet (slurmdbd lags): ask the controller
                    recs = slurmcli.show("job", ref.job_id)
                    counts = slurm_status.array_counts(ref.job_id, live, ended, recs)
                out.append(JobStatus(State.UNKNOWN, tasks=counts, source="squeue+sacct"))
            elif ref.job_id in live:
                st = slurm_status.from_squeue(live[ref.job_id], restarts[ref.job_id])
                if restarts[ref.job_id] and ended and ended.get(ref.job_id):
                    st.history = slurm_status.attempts_of(ref.job_id, ended[ref.job_id])
                out.append(st)
            elif ended and ended.get(ref.job_id):
                out.append(slurm_status.from_sacct(ended[ref.job_id], ref.job_id))
            else:
                recs = slurmcli.show("job", ref.job_id)
                out.append(slurm_status.from_scontrol(recs[0]) if recs else JobStatus(State.UNKNOWN, source="none"))
        return out

    def _restarts(self, job_id: str) -> int:
        recs = slurmcli.show("job", job_id)
        try:
            return int(recs[0].get("Restarts", "0")) if recs else 0
        except ValueError:
            return 0
