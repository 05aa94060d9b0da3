"""From a job file, a profile and overrides to one validated, resolved job."""
from __future__ import annotations

import os

from hpclaunch.common.errors import InvalidInput, Problem
from hpclaunch.spec.alerts import user_config
from hpclaunch.spec.job import Job
from hpclaunch.spec.merge import copy_plain, merge_into, set_path
from dataclasses import dataclass
from hpclaunch.spec.overrides import parse_override
from hpclaunch.spec.profiles import LoadedProfile, load_profile
from hpclaunch.spec.typedload import Loader, SourceMap, _yaml_kind, to_plain, wrong_kind
from hpclaunch.spec.validate import job_problems
from hpclaunch.spec.yamlio import display_path, load_yaml_bytes, read_input_file

OVERRIDE_LABEL = "command line"


@dataclass
class Resolved:
    """A job ready to render: the typed job, its profile, and where each value came from."""

    job: Job
    profile: LoadedProfile
    job_path: str
    origins: dict[str, str]
    source_bytes: bytes  # the job file as read (its sha256 is the audit trail's "which file")

    @property
    def source_hash(self) -> str:
        return sha256_hex(self.source_bytes)

    def to_document(self) -> dict:
        """The resolved job as written to the run directory's job.yaml."""
        doc = to_plain(self.job)
        prof = dict(self.profile.data)
        prof.pop("defaults", None)
        doc["profile"] = {"ref": self.job.profile, "path": self.profile.path, **prof}
        doc["hpclaunch"] = {"job_file": os.path.abspath(self.job_path), "job_file_sha256": self.source_hash}
        return doc


def sha256_hex(data: bytes) -> str:
    """hashlib.sha256(data).hexdigest(). hashlib loads OpenSSL (~3 ms of a submission); CPython's
    own SHA-256 (the module hashlib falls back to) is built in and gives the same digest."""
    try:
        from _sha2 import sha256  # CPython >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()


def resolve_job(job_path: str, overrides: list[str] | tuple[str, ...] = (), cwd: str | None = None) -> Resolved:
    shown = display_path(job_path)
    source = read_input_file(job_path, "job file")  # bounded: a regular file, at most 1 MiB
    data = load_yaml_bytes(source, shown)
    found = wrong_kind(data, Job, "job file")
    if found:
        raise InvalidInput([Problem(shown, "", found, fix="start from `hpclaunch init`", has_value=False)])
    parsed = [parse_override(o) for o in overrides]
    data = copy_plain(data)
    for key, value in parsed:
        set_path(data, key, value)
    origins = {key: f"{OVERRIDE_LABEL} (-o {key})" for key, _ in parsed}
    return resolve_data(data, shown, os.path.dirname(os.path.abspath(job_path)), cwd, origins,
                        job_path=job_path, source_bytes=source)


def resolve_data(data: dict, shown: str, base_dir: str, cwd: str | None = None,
                 origins_of: dict[str, str] | None = None, *, job_path: str | None = None,
                 source_bytes: bytes = b"") -> Resolved:
    """A job from plain data (a job file's, or keyword settings'): its profile's defaults under it,
    loaded and validated. `origins_of` names the source of keys set elsewhere than `shown`."""
    origins_of = origins_of or {}
    profile_ref = data.get("profile", "local")
    profile_source = origins_of.get("profile", shown)
    if not isinstance(profile_ref, str):
        raise InvalidInput([Problem(profile_source, "profile",
                                    f"expected a profile name or path, got {_yaml_kind(profile_ref)}", profile_ref,
                                    "e.g. profile: local (see `hpclaunch profiles`)", has_value=profile_ref is not None)])
    profile = load_profile(profile_ref, base_dir, cwd, where=(profile_source, "profile"))
    merged: dict = {}
    origins: dict[str, str] = {}
    merge_into(merged, profile.profile.defaults, origins, display_path(profile.path))
    mine = user_config()  # the user's alert settings, between the site's and the job's
    if mine is not None:
        merge_into(merged, {"alerts": mine[1]}, origins, mine[0])
    merge_into(merged, data, origins, shown)
    origins.update(origins_of)
    loader = Loader(SourceMap(shown, origins))
    job = loader.load(Job, merged)
    problems = job_problems(job, loader.problems, profile.profile, SourceMap(shown, origins))
    if problems:
        raise InvalidInput(problems)
    return Resolved(job, profile, job_path or os.path.join(base_dir, shown), origins, source_bytes)
