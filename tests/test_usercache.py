"""The per-user cache (hpclaunch/common/usercache.py) and the three caches on it: the help text, parsed
job files, the Slurm facts. An entry is used only for the same material; whatever else is in the
folder (a 5-byte marshal entry claiming 2**31-1 items, a truncated or huge entry, a link, a FIFO, a
device, a folder, another user's file, a payload of the wrong kind) is ignored at no noticeable cost
(< 50 ms, < 50 MB), and the command gives the right answer."""
import json
import os
import subprocess
import sys

import pytest

from hpclaunch.common import usercache

# A probe in a fresh Python with its address space capped (a runaway allocation fails at once instead
# of taking the machine): it does the operation once (imports, a good entry), once more with no entry
# (the baseline: a cache miss), then with every entry replaced by the hostile thing, and prints
# whether the answer was still right, what the hostile entry cost over the miss, and how much the
# peak memory grew.
PROBE = r"""
import json, os, resource, stat, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
kind, plant = sys.argv[1], sys.argv[2]
folder = os.path.join(os.environ["XDG_CACHE_HOME"], "hpclaunch")
FACTS = {"config": "ClusterName=ci\n", "partition": "PartitionName=debug\n", "node": "NodeName=c1\n"}

def op():
    if kind == "help":
        from hpclaunch.cli import top_help
        return top_help()
    if kind == "yaml":
        from hpclaunch.spec.yamlio import load_yaml_file
        return load_yaml_file(os.environ["PROBE_JOB"])
    from hpclaunch.launchers.backends import slurm_facts
    found = slurm_facts.load()
    slurm_facts.store(FACTS)  # as a submission does after asking the controller
    return found

def entries():
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}

good = op()
good = op() if kind == "facts" else good  # the facts' first load found nothing; the second, what was stored
saved = entries()
assert saved, "no entry was made"
for name in saved:
    os.unlink(os.path.join(folder, name))
t0 = time.perf_counter(); miss = op(); miss_s = time.perf_counter() - t0
for name in saved:
    path = os.path.join(folder, name)
    os.unlink(path)
    exec(plant)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter(); again = op(); hostile_s = time.perf_counter() - t0
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
right = again is None if kind == "facts" else again == good
print(json.dumps({"right": right, "extra_s": hostile_s - miss_s, "grew_kib": grew}))
"""

HUGE = 300 << 20
PLANTS = {
    # marshal's tuple, list and string headers claiming 2**31-1 items (what made it 47 s and 16.8 GB)
    "marshal tuple of 2**31-1": "open(path, 'wb').write(b'(\\xff\\xff\\xff\\x7f')",
    "marshal list of 2**31-1": "open(path, 'wb').write(b'[\\xff\\xff\\xff\\x7f')",
    "marshal string of 2**31-1": "open(path, 'wb').write(b'u\\xff\\xff\\xff\\x7f')",
    "our header, truncated": "open(path, 'wb').write(saved[name][:len(saved[name]) // 2])",
    "our header, absurd length": "open(path, 'wb').write(b'hpclaunch-cache 2\\n99999999999\\n')",
    "empty": "open(path, 'wb').close()",
    "sparse file of 300 MiB": f"f = open(path, 'wb'); f.truncate({HUGE}); f.close()",
    "symlink to /dev/zero": "os.symlink('/dev/zero', path)",
    "symlink to a huge file": f"f = open(path + '.big', 'wb'); f.truncate({HUGE}); f.close(); os.symlink(path + '.big', path)",
    "FIFO": "os.mkfifo(path)",
    "folder": "os.mkdir(path)",
    "another user's good entry": "open(path, 'wb').write(saved[name]); os.chown(path, 65534, 65534)",
    "character device": "os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))",
}
ROOT_ONLY = ("another user's good entry", "character device")


def _probe(kind, plant, tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), SLURM_CONF=str(tmp_path / "slurm.conf"),
               PROBE_JOB=str(tmp_path / "job.yaml"), COLUMNS="100")
    (tmp_path / "slurm.conf").write_text("ClusterName=ci\n")
    (tmp_path / "job.yaml").write_text("name: cached\ncommand: [python, train.py]\nresources: {nodes: 2}\n")
    proc = subprocess.run([sys.executable, "-c", PROBE, kind, plant], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, f"{kind}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["help", "yaml", "facts"])
@pytest.mark.parametrize("what", list(PLANTS))
def test_a_hostile_or_damaged_entry_costs_nothing_and_is_ignored(kind, what, tmp_path):
    if what in ROOT_ONLY and os.geteuid() != 0:
        pytest.skip("needs root (chown, mknod)")
    result = _probe(kind, PLANTS[what], tmp_path)
    assert result["right"], f"{kind}, {what}: the answer changed"
    assert result["extra_s"] < 0.05, f"{kind}, {what}: {result['extra_s'] * 1e3:.0f} ms more than no entry"
    assert result["grew_kib"] < 50 << 10, f"{kind}, {what}: peak memory grew {result['grew_kib'] >> 10} MiB"


def test_an_entry_is_used_only_for_the_same_material(cache_home):
    assert usercache.store("x", "material", b"payload")
    assert usercache.load("x", "material") == b"payload"
    assert usercache.load("x", "material ") is None  # one byte of what it was made from changed
    assert usercache.load("y", "material") is None
    entry = cache_home / "hpclaunch" / "x"
    assert entry.stat().st_mode & 0o777 == 0o600
    assert not b"marshal" in entry.read_bytes() and entry.read_bytes().endswith(b"payload")


def test_a_payload_larger_than_its_limit_is_neither_stored_nor_read(cache_home):
    assert not usercache.store("x", "m", b"x" * usercache.MAX_ENTRY)
    assert usercache.store("x", "m", b"x" * 100, limit=200)
    assert usercache.load("x", "m", limit=50) is None


def test_folder_writable_by_others_or_not_ours_is_not_used(cache_home):
    folder = cache_home / "hpclaunch"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert usercache.folder() is None
    assert not usercache.store("x", "m", b"1")
    assert not (folder / "x").exists()
    folder.chmod(0o700)
    assert usercache.folder() == str(folder)


def test_a_yaml_entry_of_another_kind_of_value_is_parsed_again(cache_home, tmp_path):
    from hpclaunch.spec import yamlio
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nresources: {nodes: 2}\n")
    assert yamlio.load_yaml_file(str(job)) == {"name": "a", "resources": {"nodes": 2}}
    (entry,) = (cache_home / "hpclaunch").iterdir()
    raw = entry.read_bytes()
    for payload in (b'{"name": "b"', b'[' * 100000, b'"just text"', b'{"name": "\xff"}'):
        entry.write_bytes(raw[:raw.index(b'{"name"')] + payload)
        parsed = yamlio.load_yaml_file(str(job))
        assert parsed == {"name": "a", "resources": {"nodes": 2}} or payload == b'"just text"' and parsed == "just text"


def test_help_from_cache_is_argparse_help(cache_home):
    from hpclaunch.cli import parser
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home), COLUMNS="100")
    code = ("import sys; from hpclaunch.cli import main; main(['--help']); "
            "print('argparse' in sys.modules or 'typing' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
            for _ in range(2)]
    os.environ["COLUMNS"], saved = "100", os.environ.get("COLUMNS")
    try:
        expected = parser.build().format_help()
    finally:
        os.environ.pop("COLUMNS") if saved is None else os.environ.__setitem__("COLUMNS", saved)
    assert runs[0] == expected + "True\n"
    assert runs[1] == expected + "False\n"  # the second one loaded no argparse, nor typing (re, enum...)


def test_every_cache_keeps_only_its_newest_entries(cache_home, tmp_path, monkeypatch):
    """Each entry is keyed by what it was made from: a new slurm.conf (every edit) or terminal width
    makes a new one, so each kind keeps only its newest few (as parsed YAML does)."""
    from hpclaunch.cli import top_help
    from hpclaunch.launchers.backends import slurm_facts

    def entries(prefix):
        return sorted(n for n in os.listdir(cache_home / "hpclaunch") if n.startswith(prefix))

    conf = tmp_path / "slurm.conf"
    monkeypatch.setenv("SLURM_CONF", str(conf))
    texts = {k: f"{k} text\n" for k in slurm_facts.KINDS}
    for i in range(slurm_facts.CACHED_CONFS + 4):
        conf.write_text(f"ClusterName=c{i}\n" + "#" * i)  # another size: another slurm.conf version
        slurm_facts.store(texts)
    assert len(entries("slurm-facts-")) == slurm_facts.CACHED_CONFS
    assert slurm_facts.load() == texts  # the newest is among them
    for width in range(60, 72):
        monkeypatch.setenv("COLUMNS", str(width))
        top_help()
    assert len(entries("help-")) == 8
