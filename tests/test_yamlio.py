"""hpclaunch/spec/yamlio.py: job.yaml's plain writer reads back (yaml.safe_load, as train_entry reads
it) as the very values it was given, and a file's document comes from the user cache only for the
same text, without importing PyYAML."""
import json
import math
import os
import random
import subprocess
import sys

import pytest
import yaml

from hpclaunch.common import usercache
from hpclaunch.spec import yamlio

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "golden", "job.yaml")


def _same(a, b):
    """Equal values of the same types, in the same order (1 == True == 1.0 for Python, not for us)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


# Text YAML 1.1 reads as something else unless quoted, and characters it escapes or refuses raw.
WORDS = ["yes", "No", "ON", "off", "true", "False", "null", "NULL", "~", "y", "n", "1", "0x1f", "0o7", "1e3",
         "1_000", ".inf", "-.inf", ".nan", "2001-12-14", "12:30", "<<", "=", "", " ", "-", "- a", "a: b", "#c",
         "foo", "/tmp/x", "a.b", "env.FOO", "${X}", "@file", "!tag", "&a", "*a", "%", "|", ">", "'q'", '"q"']
CHARS = ["a", "Z", "_", "/", ".", "-", " ", ":", "#", "'", '"', "\\", "\n", "\r", "\t", "\x00", "\x1b", "\x7f",
         "\x85", "\xa0", "é", "\u2028", "\ufeff", "\ud7ff", "\U0001f600", "0", "e", "~", "&", "*", "!", "{", "[",
         ",", "?", "|", ">", "="]
FLOATS = [0.0, -0.0, 1.5, 1e-05, 1e16, -2.5e300, float("inf"), float("-inf"), float("nan"), 0.1, 5e-324]


def _documents(n, seed=7):
    rng = random.Random(seed)

    def text():
        if rng.random() < 0.4:
            return rng.choice(WORDS)
        return "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 8)))

    def scalar():
        return rng.choice([text, text, lambda: rng.choice([0, 7, -5, 10 ** 18, -(10 ** 19)]),
                           lambda: rng.choice(FLOATS), lambda: rng.random() < 0.5, lambda: None])()

    def value(depth=0):
        r = rng.random()
        if depth > 3 or r < 0.3:
            return scalar()
        if r < 0.65:
            return {text(): value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    for i in range(n):
        yield {text(): value() for _ in range(rng.randint(0, 5))} if i % 4 else [value() for _ in range(3)]


def test_the_plain_writer_reads_back_as_the_same_values():
    for doc in _documents(5000):
        out = []
        assert yamlio._plain_block(doc, 0, out), doc   # plain values: never handed to PyYAML
        text = "".join(out)
        assert _same(yaml.safe_load(text), doc), (doc, text)


def test_a_resolved_job_reads_back_as_written(cache_home):
    from hpclaunch.spec.loading import resolve_job
    doc = resolve_job(JOB).to_document()
    text = yamlio.dump_yaml(doc)
    assert _same(yaml.safe_load(text), doc)
    assert "\nresources:\n  nodes: " in text   # block style, as PyYAML wrote it


def test_values_the_writer_does_not_write_go_to_pyyaml():
    import datetime
    doc = {"when": datetime.date(2026, 11, 24), "n": 1}
    assert yaml.safe_load(yamlio.dump_yaml(doc)) == doc


def _load_in_a_fresh_python(path, cache_home):
    code = ("import sys; from hpclaunch.spec.yamlio import load_yaml_file; d = load_yaml_file(sys.argv[1]);"
            "print(repr(d)); print('yaml' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env=dict(os.environ, XDG_CACHE_HOME=str(cache_home)), check=True)
    data, imported = proc.stdout.splitlines()
    return data, imported == "True"


def test_a_file_read_before_comes_from_the_cache_without_pyyaml(tmp_path, cache_home):
    path = tmp_path / "job.yaml"
    path.write_text("name: a\ncommand: [echo, '{i}']\nresources: {nodes: 2}\n")
    first, imported = _load_in_a_fresh_python(path, cache_home)
    assert imported   # parsed
    again, imported = _load_in_a_fresh_python(path, cache_home)
    assert again == first and not imported   # the same text: from the cache
    path.write_text("name: a\ncommand: [echo, '{i}']\nresources: {nodes: 3}\n")
    changed, imported = _load_in_a_fresh_python(path, cache_home)
    assert imported and "'nodes': 3" in changed   # a changed text is parsed again, never the old entry


def test_an_entry_is_read_back_only_for_its_own_text(tmp_path, cache_home):
    text = "name: a\nresources: {nodes: 2}\n"
    first = yamlio.load_yaml_bytes(text.encode(), "job.yaml")
    name, material = yamlio.cache_entry(text)
    assert json.loads(usercache.load(name, material)) == first
    # An entry under this name made from other text (a clash of names, or a planted file) is not used.
    usercache.store(name, yamlio.cache_entry("name: b\n")[1], b'{"name": "b"}')
    assert yamlio.load_yaml_bytes(text.encode(), "job.yaml") == {"name": "a", "resources": {"nodes": 2}}


def test_bad_yaml_is_never_cached_and_still_one_line(tmp_path, cache_home):
    for _ in range(2):
        with pytest.raises(Exception) as e:
            yamlio.load_yaml_bytes(b"a: [1, 2\n", "bad.yaml")
        assert str(e.value).startswith("bad.yaml:") and "\n" not in str(e.value)
    folder = cache_home / "hpclaunch"
    assert not folder.exists() or not [n for n in os.listdir(folder) if n.startswith("yaml-")]


def test_the_cache_keeps_only_the_newest_documents(cache_home, monkeypatch):
    monkeypatch.setattr(yamlio, "CACHED_DOCUMENTS", 5)
    for i in range(12):
        yamlio.load_yaml_bytes(f"n: {i}\n".encode(), "job.yaml")
    names = [n for n in os.listdir(cache_home / "hpclaunch") if n.startswith("yaml-")]
    assert len(names) == 5
