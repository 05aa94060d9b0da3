"""The Kubernetes target: `hpclaunch render job.yaml --target kubernetes` prints the job as a JobSet
(jobset.x-k8s.io/v1alpha2) for `kubectl create -f -`, admitted by Kueue when a queue is named.

One replicated Job of `resources.nodes` indexed pods, one pod per node, as JobSet's own PyTorch
example: each pod runs torchrun, which forks `tasks_per_node` ranks and meets the other pods at the
c10d store of pod 0. Pod 0's name is stable (`<jobset>-node-0-0` under the JobSet's headless
service); the endpoint is its FQDN, the name kubelet writes first into pod 0's own /etc/hosts, so
torchrun on pod 0 knows it hosts the store without waiting for DNS. The monitor is a native
sidecar (an init container with restartPolicy Always: it starts first and is stopped when the
trainer ends, so the Job completes), writing into the run directory on the shared volume.

The manifest is built as data and written by PyYAML rather than from a template: every value is
quoted by the YAML writer, and what the tests validate against the API schemas is the very
document printed. Kubernetes expands `$(NAME)` in a container's command, args and env values;
every value from the job is written with `$` doubled, which the kubelet reads back as one `$`:
quotes, `$`, backquotes and newlines reach the pod as data, and no shell is involved.

Only `pod_plan` reads the scheduler-neutral plan (launchers/plan.py).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from hpclaunch.common.errors import InvalidInput, Problem
from hpclaunch.common.version import __version__
from hpclaunch.launchers.plan import Plan, build_plan
from hpclaunch.spec.kubernetes import KubernetesOptions
from hpclaunch.spec.typedload import SourceMap
from hpclaunch.spec.units import parse_mem_mib
from hpclaunch.spec.yamlio import display_path

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
DEFAULT_PORT = 29500          # torchrun's: each pod has its own network namespace, no clash to avoid
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"              # set by JobSet on every pod
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"    # 0, then 1, ... after each JobSet restart
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MONITOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}

# Launchers that have no meaning in a pod without an operator of their own: why, and what would run it.
_ELSEWHERE = {
    "mpi": "MPI ranks need an MPI operator (e.g. Kubeflow's MPIJob) to start them across pods",
    "horovod": "horovodrun reaches the other nodes by ssh or MPI, which needs an MPI operator (Kubeflow's MPIJob)",
    "srun": "srun is Slurm's own task starter",
    "ray": "a Ray cluster on Kubernetes is KubeRay's RayJob",
    "tensorflow": "TF_CONFIG per pod is Kubeflow's TFJob",
}
_OTHER = "this target has no pod shape for it yet"


def render(resolved) -> str:
    """The JobSet YAML of a resolved job, or InvalidInput: one line per thing it cannot express."""
    problems = refusals(resolved)
    if problems:
        raise InvalidInput(problems)
    plan = pod_plan(build_plan(resolved), resolved.job.kubernetes)
    return header(plan) + dump(jobset(plan))


def refusals(resolved) -> list:
    """What of the job this target cannot express, each a Problem naming its file and field."""
    job, profile = resolved.job, resolved.profile
    sources = SourceMap(display_path(resolved.job_path), resolved.origins)
    out = []

    def bad(path, message, value, fix, source=None):
        out.append(Problem(source or sources.of(path), path, message, value, fix, has_value=value is not None))

    if job.launcher != "torchrun":
        bad("launcher", f"the kubernetes target starts ranks with torchrun only: {_ELSEWHERE.get(job.launcher, _OTHER)}",
            job.launcher, "use launcher: torchrun (supported: torchrun), or render it for Slurm (--target slurm)")
    k = job.kubernetes or KubernetesOptions()
    if k.image is None:
        bad("kubernetes.image", "is not set: every pod runs this image (the job's program and hpclaunch)", None,
            "set kubernetes.image in the job, or defaults: {kubernetes: {image: ...}} in the profile")
    if k.runs_claim is None:
        bad("kubernetes.runs_claim", "is not set: the run directory (checkpoints, logs, the monitor's files) "
            "lives on a volume every pod mounts", None,
            "name a ReadWriteMany PersistentVolumeClaim of the namespace in kubernetes.runs_claim")
    if job.sweep is not None:
        bad("sweep", "a sweep is a Slurm job array; the kubernetes target renders one job", "(a sweep)",
            "render one point at a time (-o to set its values) and drop sweep:")
    if job.container is not None:
        bad("container", "runs the program in a container on the Slurm nodes; a pod already runs kubernetes.image",
            job.container.image, "drop container: and set kubernetes.image")
    if job.workdir is not None and not job.workdir.startswith("/"):
        bad("workdir", "is relative: a pod has no submit directory to start from", job.workdir,
            "give an absolute path inside the image, or drop workdir: (the image's WORKDIR)")
    if job.requeue.by == "program":
        bad("requeue.by", "the program requeues itself with `scontrol requeue`, which a pod cannot run", "program",
            "use requeue.by: hpclaunch (on Kubernetes, JobSet restarts the pods)")
    textfile = profile.profile.monitor.prometheus_textfile_dir
    if textfile is not None and job.monitor.interval:
        bad("monitor.prometheus_textfile_dir", "is a folder on the Slurm nodes; the sidecar cannot reach a "
            "node's node-exporter folder", textfile, "use a profile without it; monitor.prometheus_port serves "
            "the sidecar's readings instead", source=display_path(profile.path))
    return out


@dataclasses.dataclass(frozen=True)
class PodPlan:
    """Everything the JobSet holds, per pod (one pod per node)."""

    name: str                          # the JobSet's: a DNS label short enough for its pods' host names
    job_name: str                      # exact
    profile_name: str
    nodes: int
    tasks_per_node: int
    cpus: int                          # per pod: ranks x CPUs per rank
    memory: Optional[str]              # per pod, a Kubernetes quantity
    gpus: int
    command: Tuple[str, ...]           # what each rank runs
    env: Tuple[Tuple[str, str], ...]   # site's, then the job's
    workdir: Optional[str]
    port: int
    deadline_s: Optional[int]          # activeDeadlineSeconds: the time limit less the grace; None: no limit
    grace_s: Optional[int]             # SIGTERM this long before the limit (Slurm's requeue signal)
    max_attempts: int
    requeue_exit: int
    monitor_interval: float
    monitor_nvml: bool
    prometheus_port: Optional[int]
    k: KubernetesOptions


def pod_plan(r: Plan, k: KubernetesOptions) -> PodPlan:
    """What the manifest needs from the plan: the only place that reads it."""
    grace = r.requeue_grace if r.warn_signal and r.requeue_grace < r.time_s else None
    return PodPlan(
        name=k8s_name(r.slug, r.nodes), job_name=r.job_name, profile_name=r.profile_name, nodes=r.nodes,
        tasks_per_node=r.tasks_per_node, cpus=r.tasks_per_node * r.cpus_per_task, memory=quantity(r.mem),
        gpus=r.gpus_per_node, command=r.command, env=r.env, workdir=r.workdir,
        port=r.rendezvous_port or DEFAULT_PORT, grace_s=grace,
        deadline_s=r.time_s - (grace or 0) if r.time_s > 0 else None,  # Slurm's time 0: no limit
        max_attempts=r.max_attempts, requeue_exit=r.requeue_exit, monitor_interval=r.monitor_interval,
        monitor_nvml="nvml" in r.monitor_sources and r.gpus_per_node > 0 and k.monitor_node_gpus,
        prometheus_port=r.prometheus_port, k=k)


def k8s_name(slug: str, nodes: int) -> str:
    """The JobSet's name from the job's slug: a DNS label whose pods' host names
    (`<name>-node-0-<index>`) stay within 63 characters."""
    text = "".join(c if c.isalnum() and c.isascii() else "-" for c in slug.lower())
    text = "-".join(part for part in text.split("-") if part)
    room = 63 - len(f"-{REPLICATED_JOB}-0-{nodes - 1}")
    return text[:room].rstrip("-") or "job"


def quantity(mem: Optional[str]) -> Optional[str]:
    """A Slurm memory size (a bare number is MB, suffixes are powers of 1024) as a Kubernetes quantity."""
    if mem is None:
        return None
    parse_mem_mib(mem)  # validated already; a ValueError here is a bug, not input
    number, unit = (mem[:-1], mem[-1].upper()) if mem[-1].isalpha() else (mem, "M")
    return f"{int(number)}{unit}i"


def literal(text: str) -> str:
    """``text`` as Kubernetes reads it back unexpanded: `$$` is one `$`, so `$(NAME)` stays as written."""
    return text.replace("$", "$$")


def leader(p: PodPlan) -> str:
    return f"{p.name}-{REPLICATED_JOB}-0-0.{p.name}.$(HPCLAUNCH_NAMESPACE).svc.{p.k.cluster_domain}"


def _field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _ids(p: PodPlan) -> list:
    """The variables both containers read: defined first, since later values refer to them."""
    return [
        _field("HPCLAUNCH_NAMESPACE", "metadata.namespace"),
        _field("HPCLAUNCH_JOB_ID", f"metadata.labels['{JOBSET_UID}']"),
        _field("HPCLAUNCH_ATTEMPT", f"metadata.labels['{RESTART_ATTEMPT}']"),
        _field("HPCLAUNCH_NODE_RANK", f"metadata.annotations['{COMPLETION_INDEX}']"),
        {"name": "HPCLAUNCH_RUN_DIR", "value": f"{p.k.runs_path}/{p.name}-$(HPCLAUNCH_JOB_ID)"},
        {"name": "HPCLAUNCH_LOG_DIR", "value": "$(HPCLAUNCH_RUN_DIR)/logs/attempt$(HPCLAUNCH_ATTEMPT)"},
        {"name": "HPCLAUNCH_TASKS_PER_NODE", "value": str(p.tasks_per_node)},
    ]


def trainer(p: PodPlan) -> dict:
    env = _ids(p) + [
        {"name": "HPCLAUNCH_JOB_NAME", "value": literal(p.job_name)},
        {"name": "HPCLAUNCH_LAUNCHER", "value": "torchrun"},
        {"name": "HPCLAUNCH_NNODES", "value": str(p.nodes)},
        {"name": "HPCLAUNCH_MAX_ATTEMPTS", "value": str(p.max_attempts)},
        {"name": "HPCLAUNCH_REQUEUE_FLAG", "value": "$(HPCLAUNCH_RUN_DIR)/.hpclaunch/requeue-requested"},
        {"name": "HPCLAUNCH_REQUEUE_EXIT", "value": str(p.requeue_exit)},
        {"name": "HPCLAUNCH_MASTER_ADDR", "value": leader(p)},
        {"name": "HPCLAUNCH_MASTER_PORT", "value": str(p.port)},
    ] + [{"name": name, "value": literal(value)} for name, value in p.env]
    args = [f"--nnodes={p.nodes}", f"--nproc-per-node={p.tasks_per_node}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={leader(p)}:{p.port}", "--rdzv-id=$(HPCLAUNCH_JOB_ID)", "--max-restarts=0",
            "--log-dir=$(HPCLAUNCH_LOG_DIR)/torchelastic", "--no-python"] + [literal(a) for a in p.command]
    requests: dict = {"cpu": str(p.cpus)}
    limits: dict = {}
    if p.memory:
        requests["memory"] = limits["memory"] = p.memory
    if p.gpus:
        limits[p.k.gpu_resource] = p.gpus
    c = {"name": "trainer", "image": p.k.image, "command": ["torchrun"], "args": args}
    if p.workdir:
        c["workingDir"] = p.workdir
    c.update({"env": env, "ports": [{"name": "rendezvous", "containerPort": p.port}],
              "resources": {"requests": requests, **({"limits": limits} if limits else {})},
              "volumeMounts": [{"name": "runs", "mountPath": p.k.runs_path},
                               {"name": "dshm", "mountPath": "/dev/shm"}]})
    return c


def monitor(p: PodPlan) -> dict:
    args = ["-m", "hpclaunch.monitors", "--interval", str(p.monitor_interval), "--run-dir", "$(HPCLAUNCH_RUN_DIR)",
            "--node-id", "$(HPCLAUNCH_NODE_RANK)"]
    env = _ids(p)
    if p.monitor_nvml:
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    else:
        args.append("--no-nvml")
    if p.prometheus_port:
        args += ["--prometheus-port", str(p.prometheus_port)]
    c = {"name": "monitor", "image": p.k.monitor_image or p.k.image, "restartPolicy": "Always",
         "command": ["python3"], "args": args, "env": env}
    if p.prometheus_port:
        c["ports"] = [{"name": "metrics", "containerPort": p.prometheus_port}]
    c.update({"resources": MONITOR_RESOURCES, "volumeMounts": [{"name": "runs", "mountPath": p.k.runs_path}]})
    return c


def pod_spec(p: PodPlan) -> dict:
    spec: dict = {"restartPolicy": "Never"}
    if p.grace_s:
        spec["terminationGracePeriodSeconds"] = p.grace_s
    if p.k.service_account:
        spec["serviceAccountName"] = p.k.service_account
    if p.k.node_selector:
        spec["nodeSelector"] = dict(p.k.node_selector)
    if p.k.tolerations:
        spec["tolerations"] = [{k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value),
                                                  ("effect", t.effect)) if v is not None}
                               for t in p.k.tolerations]
    if p.monitor_interval > 0:
        spec["initContainers"] = [monitor(p)]
    spec["containers"] = [trainer(p)]
    spec["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": p.k.runs_claim}},
                       {"name": "dshm", "emptyDir": {"medium": "Memory"}}]  # NCCL and DataLoader workers
    return spec


def jobset(p: PodPlan) -> dict:
    meta: dict = {"name": p.name}
    if p.k.namespace:
        meta["namespace"] = p.k.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "hpclaunch", **({QUEUE_LABEL: p.k.queue} if p.k.queue else {})}
    meta["annotations"] = {"hpclaunch/job-name": p.job_name, "hpclaunch/profile": p.profile_name}
    job: dict = {"parallelism": p.nodes, "completions": p.nodes, "completionMode": "Indexed", "backoffLimit": 0}
    if p.deadline_s is not None:
        job["activeDeadlineSeconds"] = p.deadline_s
    job["template"] = {"spec": pod_spec(p)}
    return {
        "apiVersion": API_VERSION, "kind": "JobSet", "metadata": meta,
        "spec": {
            # Any failed pod fails its Job (backoffLimit 0) and JobSet restarts every pod together,
            # as Slurm requeues the whole job: torchrun's rendezvous needs all of them anew.
            "failurePolicy": {"maxRestarts": p.max_attempts - 1},
            "network": {"enableDNSHostnames": True, "subdomain": p.name, "publishNotReadyAddresses": True},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def header(p: PodPlan) -> str:
    return (f"# Generated by hpclaunch {__version__} from job '{p.name}' and profile '{p.profile_name}'.\n"
            f"# Re-create it with `hpclaunch render JOB.yaml --target kubernetes`; run it with `kubectl create -f`\n"
            f"# (needs JobSet; Kueue admits it when {QUEUE_LABEL} is set). Values from the job file are data:\n"
            f"# `$$` is Kubernetes' escape for one `$` in command, args and env values.\n")


def dump(doc: dict) -> str:
    import yaml  # PyYAML: loaded for this target only
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=110)
