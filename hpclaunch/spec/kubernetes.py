"""The job's `kubernetes:` section: what `hpclaunch render --target kubernetes` needs that a Slurm
job does not say (the image, the namespace, the Kueue queue, the volume of the run directories,
placement). A site sets it once in its profile's `defaults: {kubernetes: ...}`, as it sets
`slurm: {partition: ...}`; a job overrides any key. The target's own rules (the launcher it can
start, what it refuses) are in launchers/targets/kubernetes.py.

Every value here lands in a Kubernetes object, where the API server checks names against DNS and
label grammars: each is checked here against the same grammar and length, so a bad value is one
line naming the file and the field before anything reaches a cluster.
"""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional, Tuple

from dataclasses import dataclass
from hpclaunch.spec.typedload import Scalar, field

MAX_ENTRIES = 32
MAX_IMAGE = 512

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# An OCI image reference's characters (registry[:port]/path[:tag][@digest]); the registry checks the rest.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")


def _dns_label(what: str):
    def check(value: str) -> Optional[Tuple[str, str]]:
        if not _DNS_LABEL.fullmatch(value):
            return (f"is not a valid {what} (a DNS label)",
                    "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit")
        return None
    return check


def _dns_subdomain(what: str):
    def check(value: str) -> Optional[Tuple[str, str]]:
        if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
            return (f"is not a valid {what} (a DNS subdomain)",
                    "use at most 253 lowercase letters, digits, '-' and '.', e.g. training-runs")
        return None
    return check


def label_key_problem(key: str) -> Optional[str]:
    """Why ``key`` is not a Kubernetes label key ([prefix/]name), or None."""
    prefix, _, name = key.rpartition("/")
    if not _LABEL_NAME.fullmatch(name):
        return "its name part is not 1-63 letters, digits, '-', '_' and '.', starting and ending alphanumeric"
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "its prefix is not a DNS subdomain"
    return None


def _label_value(value: str) -> Optional[Tuple[str, str]]:
    if not _LABEL_VALUE.fullmatch(value):
        return ("is not a valid label value", "use at most 63 letters, digits, '-', '_' and '.', "
                "starting and ending with a letter or digit")
    return None


def _image(value: str) -> Optional[Tuple[str, str]]:
    if len(value) > MAX_IMAGE or not _IMAGE.fullmatch(value):
        return ("is not an image reference", "e.g. nvcr.io/nvidia/pytorch:24.05-py3 or "
                "registry.example.org/team/train@sha256:... (no spaces, at most 512 characters)")
    return None


def _node_selector(value: Dict[str, str]) -> Optional[Tuple[str, str]]:
    if len(value) > MAX_ENTRIES:
        return (f"has {len(value)} entries (at most {MAX_ENTRIES})", "keep the labels that choose the nodes")
    for key, item in value.items():
        found = label_key_problem(key)
        if found:
            return (f"key {key!r}: {found}", "e.g. nvidia.com/gpu.product or node-pool")
        if _label_value(item):
            return (f"the value of {key!r} is not a valid label value",
                    "at most 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric")
    return None


def _tolerations(value: list) -> Optional[Tuple[str, str]]:
    if len(value) > MAX_ENTRIES:
        return (f"has {len(value)} entries (at most {MAX_ENTRIES})", "keep the taints the job's nodes carry")
    return None


def _path(value: str) -> Optional[Tuple[str, str]]:
    if len(value) > 1024 or not _PATH.fullmatch(value) or value == "/":
        return ("is not an absolute plain path", "e.g. /hpclaunch/runs (letters, digits and . _ / + -)")
    return None


def _resource_name(value: str) -> Optional[Tuple[str, str]]:
    if "/" not in value or label_key_problem(value):
        return ("is not an extended resource name", "e.g. nvidia.com/gpu or amd.com/gpu")
    return None


@dataclass
class Toleration:
    """A taint the job's pods tolerate (a pod's `tolerations:` entry)."""

    key: Optional[str] = field(None, help="the taint's key (null with operator Exists: every taint)",
                               check=lambda v: ("is not a label key", "e.g. nvidia.com/gpu")
                               if label_key_problem(v) else None)
    operator: Literal["Equal", "Exists"] = field("Equal", help="Equal: key and value match; Exists: the key does")
    value: Optional[str] = field(None, help="the taint's value (operator Equal)", check=_label_value)
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = field(
        None, help="the taint effect tolerated (null: every effect)")


@dataclass
class KubernetesOptions:
    """What `hpclaunch render --target kubernetes` needs (docs/targets.md)."""

    image: Optional[str] = field(None, check=_image, example="nvcr.io/nvidia/pytorch:24.05-py3",
                                 help="the image every pod runs: it holds the job's program and hpclaunch "
                                 "(the monitor sidecar runs `python3 -m hpclaunch.monitors`); required")
    monitor_image: Optional[str] = field(None, check=_image,
                                         help="the monitor sidecar's image (default: image)")
    namespace: Optional[str] = field(None, check=_dns_label("namespace"),
                                     help="the namespace (default: kubectl's current one)")
    queue: Optional[str] = field(None, check=_dns_label("queue name"),
                                 help="the Kueue LocalQueue (label kueue.x-k8s.io/queue-name); null: no label")
    service_account: Optional[str] = field(None, check=_dns_subdomain("service account name"),
                                           help="the pods' service account (default: the namespace's default)")
    runs_claim: Optional[str] = field(None, check=_dns_subdomain("claim name"),
                                      help="a ReadWriteMany PersistentVolumeClaim holding the run directories "
                                      "(checkpoints, logs, the monitor's files); required")
    runs_path: str = field("/hpclaunch/runs", check=_path,
                           help="where runs_claim is mounted; the run directory is RUNS_PATH/<name>-<JobSet uid>")
    gpu_resource: str = field("nvidia.com/gpu", check=_resource_name,
                              help="the extended resource resources.gpus_per_node asks for")
    monitor_node_gpus: bool = field(False, help="let the monitor sidecar read the node's GPUs "
                                    "(NVIDIA_VISIBLE_DEVICES=all: every GPU of the node, and only where the "
                                    "NVIDIA runtime accepts it from unprivileged containers); false: the "
                                    "sidecar samples the host only")
    node_selector: Dict[str, Scalar] = field(default_factory=dict, check=_node_selector,
                                             help="node labels the pods need, e.g. {nvidia.com/gpu.product: "
                                             "NVIDIA-A100-SXM4-80GB}")
    tolerations: List[Toleration] = field(default_factory=list, check=_tolerations,
                                          help="taints the pods tolerate")
    cluster_domain: str = field("cluster.local", check=_dns_subdomain("cluster domain"),
                                help="the cluster's DNS domain (kubelet's clusterDomain), in the leader's name")
