"""Finding and loading cluster profiles: user folders first, then the shipped ones; `extends:` chains."""
from __future__ import annotations

import os

from hpclaunch import hpc_profiles  # package data, importable in editable and wheel installs

from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem
from hpclaunch.spec.job import env_entry_problem
from hpclaunch.spec.merge import merge_into
from dataclasses import dataclass
from hpclaunch.spec.profile import Profile
from hpclaunch.spec.remote import entry_problems
from hpclaunch.spec.typedload import Loader, SourceMap, wrong_kind
from hpclaunch.spec.yamlio import display_path, load_yaml_file


def shipped_dir() -> str:
    return os.path.dirname(os.path.abspath(hpc_profiles.__file__))


def search_dirs(cwd: str | None = None) -> list[str]:
    """Where profile names are looked up, in order."""
    cwd = cwd or os.getcwd()
    home = os.path.expanduser("~")
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [os.path.join(cwd, "hpc_profiles"), os.path.join(config, "hpclaunch", "profiles"), shipped_dir()]


def find_profile(ref: str, base_dir: str | None = None, cwd: str | None = None,
                 where: tuple[str, str] | None = None) -> str:
    """The file a profile reference names: a path (relative to base_dir) or a name.

    `where` is (source, field path) of the reference, e.g. ("job.yaml", "profile"), so that a
    reference that names nothing is reported like any other bad value of that file."""
    if ref.endswith((".yaml", ".yml")) or os.sep in ref:
        path = ref if os.path.isabs(ref) else os.path.join(base_dir or os.getcwd(), ref)
        if not os.path.exists(path):  # a FIFO or a device: read_input_file names what it is
            fix = "check the path, or use a profile name (see `hpclaunch profiles`)"
            if where:
                raise InvalidInput([Problem(where[0], where[1], "no such profile file", display_path(path), fix)])
            raise HpclaunchError(f"{display_path(path)}: no such profile file \u2014 {fix}")
        if os.path.isdir(path):  # named by the reference: the error belongs to the field that names it
            fix = "name a profile YAML file, or use a profile name (see `hpclaunch profiles`)"
            if where:
                raise InvalidInput([Problem(where[0], where[1], "is a directory, not a profile file",
                                            display_path(path), fix)])
            raise HpclaunchError(f"{display_path(path)}: is a directory, not a profile file \u2014 {fix}")
        return os.path.abspath(path)
    for folder in search_dirs(cwd):
        for ext in (".yaml", ".yml"):
            path = os.path.join(folder, ref + ext)
            if os.path.isfile(path):
                return path
    known = ", ".join(available_profiles(cwd)) or "none"
    import difflib
    close = difflib.get_close_matches(ref, available_profiles(cwd), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    if where:
        raise InvalidInput([Problem(where[0], where[1], "no such profile", ref, f"{hint}known profiles: {known}")])
    raise HpclaunchError(f"profile {ref!r} not found \u2014 {hint}known profiles: {known}")


def available_profiles(cwd: str | None = None) -> list[str]:
    names: list[str] = []
    for folder in search_dirs(cwd):
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            stem, ext = os.path.splitext(entry)
            if ext in (".yaml", ".yml") and stem not in names:
                names.append(stem)
    return names


@dataclass
class LoadedProfile:
    profile: Profile
    path: str
    chain: list[str]          # files from the base to this one
    origins: dict[str, str]   # dotted key -> file that set it
    data: dict                # merged plain data (for job.yaml)


def load_profile(ref: str, base_dir: str | None = None, cwd: str | None = None,
                 where: tuple[str, str] | None = None) -> LoadedProfile:
    """A profile with its `extends:` chain applied; `where` names the reference (see find_profile)."""
    path = find_profile(ref, base_dir, cwd, where)
    chain: list[str] = []
    layers: list[tuple[str, dict]] = []
    current = path
    while True:
        if current in chain:
            cycle = " -> ".join(display_path(p) for p in chain + [current])
            raise HpclaunchError(f"{display_path(current)}: extends: profiles extend each other in a cycle "
                                 f"({cycle}) \u2014 remove one `extends:`")
        chain.append(current)
        data = load_yaml_file(current, "profile file")
        found = wrong_kind(data, Profile, "profile")
        if found:  # the file's content is never shown: it may be any file a path named
            raise InvalidInput([Problem(display_path(current), "", found, has_value=False,
                                        fix="name a profile file (see `hpclaunch profiles`)")])
        layers.append((current, data))
        parent = data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise InvalidInput([Problem(display_path(current), "extends", "expected a profile name or path",
                                        parent, "write a name, e.g. extends: local")])
        current = find_profile(parent, os.path.dirname(current), cwd, (display_path(current), "extends"))
    merged: dict = {}
    origins: dict[str, str] = {}
    for file, data in reversed(layers):
        merge_into(merged, data, origins, display_path(file))
    merged["extends"] = layers[0][1].get("extends")
    loader = Loader(SourceMap(display_path(path), origins))
    profile = loader.load(Profile, merged)
    for name, value in (profile.env if profile is not None and profile.env else {}).items():
        # The names are written unquoted after `export`: a bad one would be shell code.
        found = env_entry_problem(str(name), [value], whose="a profile's")
        if found:
            loader.problem(f"env.{name}", *found)
    if profile is not None and profile.remote is not None:
        for found in entry_problems(profile.remote):
            loader.problem(*found)
    if loader.problems:
        raise InvalidInput(loader.problems)
    return LoadedProfile(profile, path, list(reversed(chain)), origins, merged)
