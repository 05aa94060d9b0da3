"""The backend interface: one protocol every backend implements, one state vocabulary.

Modelled on TorchX's `Scheduler` (submit_dryrun / schedule / describe / cancel) and submitit's
`Executor`: callers hold a `Backend` and a `JobRef` and never ask which backend they have.

Each backend owns its translation: `prepare(plan)` turns the scheduler-neutral plan
(launchers/plan.py) into its native request (Slurm: #SBATCH directives and the batch script), and
every later call takes that request, as TorchX's `schedule` takes its dry-run info: nothing reads
the job again. A submission is two-phase, so that nothing runs before its run directory and
registry row exist (hydra#2100: Slurm opens --output before the job's own code runs):

    req = backend.prepare(plan)                                    # pure
    ids = backend.queue(req, cwd=..., new_id=...)                  # held, nothing runs yet
    ... the runs layer makes the run directory and the registry rows ...
    backend.release(ref, req, cwd=...)                             # now it may start
    (or backend.abandon(ids) when anything in between failed)

A native request has `.plan` (what it was made from) and `.script` (the text the run directory
keeps as script.sbatch; empty where the backend runs no script).
"""
from __future__ import annotations

import abc
import enum
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from dataclasses import dataclass, field


class State(str, enum.Enum):
    """A job's state, whatever ran it. The values are Slurm's words (and hpclaunch's GAVE_UP)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    REQUEUED = "REQUEUED"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    GAVE_UP = "GAVE_UP"        # hpclaunch: every requeue attempt used
    UNKNOWN = "UNKNOWN"        # nobody knows the job any more

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.NODE_FAIL,
                          State.OUT_OF_MEMORY, State.PREEMPTED, State.BOOT_FAIL, State.DEADLINE, State.GAVE_UP})

# The exit code of a job that ended in each state: `hpclaunch submit --wait`, `Job.wait()` and
# `status` give it, the same on every backend (README, "Exit codes"). Never Slurm's "0:0" for a job
# that timed out or was cancelled. FAILED is the first failing rank's own exit code, see exit_code_for.
EXIT_CODES: Dict[State, int] = {
    State.COMPLETED: 0,
    State.TIMEOUT: 124,         # as GNU timeout(1)
    State.DEADLINE: 121,        # Slurm's --deadline passed before the job could end
    State.CANCELLED: 125,
    State.NODE_FAIL: 120,
    State.BOOT_FAIL: 120,
    State.OUT_OF_MEMORY: 122,
    State.PREEMPTED: 123,
    State.GAVE_UP: 75,          # EX_TEMPFAIL: every requeue attempt used
    State.UNKNOWN: 1,
}
FAILED_EXIT_CODE = 1            # FAILED with no rank exit code and none from the scheduler


def exit_code_for(state: "State", rank_code: Optional[int] = None, job_code: Optional[int] = None) -> int:
    """The exit code that tells the truth about a final state: 0 only for COMPLETED; FAILED gives
    the first failing rank's code (else the scheduler's, else 1); every other state its own code."""
    if state == State.FAILED:
        for code in (rank_code, job_code):
            if code:
                return int(code)
        return FAILED_EXIT_CODE
    return EXIT_CODES.get(state, EXIT_CODES[State.UNKNOWN])


def state_of(word: Optional[str], words: Optional[Dict[str, State]] = None) -> State:
    """A state word as hpclaunch records it ("CANCELLED by 0" and a trailing "+" allowed), as a State;
    `words` maps a scheduler's own words (the Slurm backend's SLURM_STATES). Others are UNKNOWN."""
    if not word:
        return State.UNKNOWN
    head = str(word).split()[0].upper().rstrip("+")
    if head in State.__members__:
        return State[head]
    return (words or {}).get(head, State.UNKNOWN)


@dataclass
class AttemptRecord:
    """One attempt of a job as its scheduler saw it (Slurm: a row of `sacct -D`, which lists every
    requeued attempt, whoever requeued it: hpclaunch, the program, or Slurm after a node failure)."""

    job_id: str
    state: State
    exit_code: Optional[int] = None
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    elapsed_s: Optional[float] = None
    nodes: str = ""


@dataclass
class JobStatus:
    state: State
    exit_code: Optional[int] = None
    elapsed: str = ""
    nodes: str = ""
    reason: str = ""
    attempts: int = 1
    source: str = ""                # squeue | sacct | scontrol | local | registry
    tasks: Dict[State, int] = field(default_factory=dict)   # an array: state -> count
    end_time: Optional[float] = None  # when a final job ended, where the backend knows (epoch seconds)
    start_time: Optional[float] = None      # when its current (last) attempt started, where known
    expected_start: Optional[float] = None  # a pending job: when the scheduler expects it to start
    history: List["AttemptRecord"] = field(default_factory=list)  # each attempt as the scheduler saw it

    def __post_init__(self) -> None:
        self.state = state_of(self.state) if not isinstance(self.state, State) else self.state
        self.tasks = {state_of(k) if not isinstance(k, State) else k: v for k, v in self.tasks.items()}

    @property
    def final(self) -> bool:
        if self.tasks:
            return all(s in FINAL_STATES for s in self.tasks)
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class Rerun:
    """A job queued again from its recorded script, without the nodes that failed under it, into the
    run directory it started in (its checkpoints and logs), its attempts counted on (runs/resubmit.py):
    what NodeFailureAware.resubmit is given."""

    script: str                        # the run directory's script, as it ran
    run_dir: str
    exclude: Tuple[str, ...]           # node names
    attempts_so_far: int


@dataclass(frozen=True)
class JobRef:
    """What names a job to its backend: its id, its run directory, and for a sweep its task count."""

    job_id: str
    run_dir: str
    array_size: int = 0


class Capability(str, enum.Enum):
    """What a backend can do beyond the interface every backend has: declared (Backend.capabilities),
    never probed."""

    JOB_FILES = "job_files"            # runs job files (`hpclaunch submit JOB.yaml`), not only callables
    DEPENDENCIES = "dependencies"      # honours Plan.after (`submit --after`)
    NODE_FAILURES = "node_failures"    # NodeFailureAware: Job.wait resubmits a job around a failed node

    def __str__(self) -> str:
        return self.value


class Backend(abc.ABC):
    """One place jobs run. Implementations: the table in choice.py (slurm, local, submitit) and the
    installed ones (entry point group hpclaunch.backends)."""

    name: str = ""
    capabilities: FrozenSet[Capability] = frozenset({Capability.JOB_FILES})

    @classmethod
    def unavailable(cls) -> Optional[str]:
        """Why this backend cannot run from here (one line with the fix), or None."""
        return None

    @classmethod
    def detected(cls) -> bool:
        """Whether this is the backend to use here when none is named (choice.default_backend_name)."""
        return False

    @abc.abstractmethod
    def cluster_name(self) -> str:
        """What the registry records as the cluster (job ids are unique per backend and cluster)."""

    def prefetch(self, preflight: bool = True) -> None:
        """Start whatever queries a submission will need, while the caller loads and renders."""

    @abc.abstractmethod
    def prepare(self, plan):
        """The plan as this backend's native request (pure: no files, no scheduler)."""

    def check(self, request, sources) -> None:
        """What this backend can never run (always checked, no queries); raise HpclaunchError."""

    def preflight(self, request, sources, test_only: bool = False) -> Optional[str]:
        """Check the request against the live resources (skipped with --no-preflight); raise
        InvalidInput / HpclaunchError. With test_only, return the backend's own verdict (Slurm:
        when and where it would start)."""
        return None

    @abc.abstractmethod
    def queue(self, request, *, cwd: str, new_id: Callable[[], str]) -> List[tuple]:
        """Queue the job held: [(job_id, task_count)], one per array chunk (one for a plain job).
        `new_id` hands out ids for backends that have no scheduler to number jobs."""

    @abc.abstractmethod
    def release(self, ref: JobRef, request, *, cwd: str) -> None:
        """Let a queued job start."""

    def abandon(self, job_ids: Iterable[str]) -> None:
        """Forget held jobs that will never be released (best effort, never raises)."""

    @abc.abstractmethod
    def status(self, ref: JobRef) -> JobStatus:
        """Where the job is now."""

    def statuses(self, refs: Sequence[JobRef]) -> List[JobStatus]:
        """Several jobs at once; backends with a controller answer with one query."""
        return [self.status(ref) for ref in refs]

    @abc.abstractmethod
    def cancel(self, ref: JobRef) -> None:
        """Stop the job (all its ranks and processes)."""


class NodeFailureAware(Backend):
    """A backend that knows its nodes: declares Capability.NODE_FAILURES, and Job.wait uses these to
    resubmit a job that a failed node took down (or holds pending) without that node."""

    capabilities = frozenset({Capability.JOB_FILES, Capability.NODE_FAILURES})

    @abc.abstractmethod
    def down_nodes(self, nodelist: str) -> List[str]:
        """The nodes of `nodelist` (the scheduler's form) that are down or failing now."""

    @abc.abstractmethod
    def job_nodes(self, job_id: str) -> str:
        """The nodes a job was given (the scheduler's form), "" when it has none yet."""

    @abc.abstractmethod
    def resubmit(self, rerun, cwd: str) -> str:
        """Queue a Rerun held; its job id (release() starts it)."""
