"""docs/threat-model.md: every claim under "What hpclaunch does" names the test that checks it, and
every test it names exists, in the file it names."""
import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "threat-model.md")
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _claims():
    """(line number, text) of each bullet under a **What hpclaunch does:** heading."""
    claims, inside = [], False
    for n, line in enumerate(open(DOC, encoding="utf-8").read().splitlines(), 1):
        if line.startswith("**"):
            inside = line.startswith("**What hpclaunch does:**")
        elif line.startswith("## "):
            inside = False
        elif inside and line.startswith("- "):
            claims.append((n, line))
    return claims


def _tests_in(path):
    tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def test_every_claim_names_its_test():
    claims = _claims()
    assert len(claims) > 40, len(claims)
    for n, line in claims:
        named = line.rstrip().endswith(")") and "(test: `tests/" in line and REF.search(line.split("(test: ", 1)[1])
        assert named, f"docs/threat-model.md:{n}: a claim with no test: {line}"


def test_every_named_test_exists():
    text = open(DOC, encoding="utf-8").read()
    refs = REF.findall(text)
    assert refs
    missing = []
    known = {}
    for path, name in refs:
        if path not in known:
            known[path] = _tests_in(path) if os.path.isfile(os.path.join(ROOT, path)) else set()
        if name not in known[path]:
            missing.append(f"{path}::{name}")
    assert missing == [], missing


def test_the_threat_model_is_linked_from_the_readme():
    assert "docs/threat-model.md" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
