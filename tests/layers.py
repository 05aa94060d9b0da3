"""The layer rules of docs/architecture.md, checked on the source with the ast module.

Every import is read, function-level ones included, resolved to the module it names, and checked:
a module imports only from its own layer or the layers below it (the leaves: only what they are
allowed), and no set of modules imports each other in a cycle. `check(sources)` takes
{module name: source text} so a test can plant a violation without touching the tree.

`scheduler_words(sources)` checks the neutral-plan rule: Slurm's words (#SBATCH, sbatch's
--dependency and --exclude, the SLURM_ variables) appear only in the modules named in SLURM_WORDS.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Dict, Iterable, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The folders of the repository and the package they are installed as (setup.cfg package_dir).
PACKAGE_DIRS = {
    "hpclaunch": "hpclaunch", "launchers": "hpclaunch.launchers", "monitors": "hpclaunch.monitors",
    "reports": "hpclaunch.reports", "train_entry": "hpclaunch.train_entry", "templates": "hpclaunch.templates",
    "hpc_profiles": "hpclaunch.hpc_profiles",
}

# Core layers, lowest first: each may import from itself and the layers before it.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("common", ("hpclaunch.common",)),
    # the launcher modules (launchers/modes/) are read by the job schema, validation and init
    ("spec", ("hpclaunch.spec", "hpclaunch.hpc_profiles", "hpclaunch.launchers.modes")),
    ("launch", ("hpclaunch.launchers.plan", "hpclaunch.templates", "hpclaunch.launchers")),
    # render: a job's script through a backend's translation (the Slurm one), so above the backends
    # and the render targets' table, which names render.py as the slurm target
    ("backends", ("hpclaunch.launchers.backends", "hpclaunch.launchers.render", "hpclaunch.launchers.targets")),
    ("runs", ("hpclaunch.runs",)),
    ("top", ("hpclaunch.cli", "hpclaunch.dashboard", "hpclaunch.__main__", "hpclaunch")),
]
# Leaves import nothing of the core but what is named here; the core's upper layers may use them.
LEAVES: Dict[str, Tuple[str, ...]] = {
    # the one writer of files in folders others can write (exclusive create, never through a link):
    # the monitor's Prometheus textfile goes to a shared folder, and a second copy of it was how the
    # textfile writer came to follow planted links (issue 44)
    "hpclaunch.monitors": ("hpclaunch.common.atomic",),
    "hpclaunch.reports": ("hpclaunch.monitors.schema",),
    "hpclaunch.train_entry": ("hpclaunch.common", "hpclaunch.spec.train", "hpclaunch.spec.typedload"),
    "hpclaunch.runtime": ("hpclaunch.common.atomic", "hpclaunch.common.checkpoint_interval"),
    # the trial side of a study (hpclaunch tune): the agent and the helper run beside the program
    "hpclaunch.tune": ("hpclaunch.common",),
}
# Which core layer may import a leaf (the leaf's users are above it).
LEAF_USERS = {"hpclaunch.monitors": "runs", "hpclaunch.reports": "runs", "hpclaunch.train_entry": "top",
              "hpclaunch.runtime": "backends", "hpclaunch.tune": "runs"}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> Optional[Tuple[str, int]]:
    """("core", index) or (leaf prefix, -1); None outside the package."""
    for leaf in LEAVES:
        if _within(module, leaf):
            return leaf, -1
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return ("core", best[0]) if best else None


def package_sources(root: str = ROOT) -> Dict[str, str]:
    """{module name: source} of every .py file the package installs."""
    out: Dict[str, str] = {}
    for folder, package in PACKAGE_DIRS.items():
        base = os.path.join(root, folder)
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, base)
            pkg = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for name in files:
                if name.endswith(".py"):
                    mod = pkg if name == "__init__.py" else f"{pkg}.{name[:-3]}"
                    with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                        out[mod] = f.read()
    return out


def imports_of(module: str, source: str, known: Set[str]) -> Iterable[Tuple[str, int]]:
    """(imported module, line) for every import in the source, at any depth, resolved. A string
    that is exactly the name of one of the package's modules (not of a package) counts as an import
    of it: that is how the lazy loaders name what they import (importlib.import_module, the backend
    table). An f-string that starts with a package's name and a dot (f"hpclaunch.cli.{name}") imports
    each module of that package whose short name is a string in the same source."""
    is_pkg = module in known and any(k.startswith(module + ".") for k in known) or module.endswith("__init__")
    tree = ast.parse(source)
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known \
                and not any(k.startswith(node.value + ".") for k in known):  # a package's name is a logger's too
            yield node.value, node.lineno
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and str(node.values[0].value).endswith(".") and str(node.values[0].value)[:-1] in known:
            # f"hpclaunch.cli.{name}": each module of that package whose short name is a string here
            # (the cli's command table) is imported by it
            prefix = node.values[0].value
            for short in sorted(strings):
                if prefix + short in known:
                    yield prefix + short, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def check(sources: Dict[str, str]) -> List[str]:
    """Every upward import, forbidden leaf import and import cycle, one line each."""
    known = set(sources)
    problems: List[str] = []
    graph: Dict[str, Set[str]] = {m: set() for m in sources}
    for module, source in sorted(sources.items()):
        mine = layer_of(module)
        for target, line in imports_of(module, source, known):
            if target not in known or target == module:
                continue  # third-party or stdlib
            graph[module].add(target)
            theirs = layer_of(target)
            if mine is None or theirs is None:
                continue
            where = f"{module}:{line} imports {target}"
            if mine[1] == -1:  # a leaf
                if theirs[0] != mine[0] and not any(_within(target, ok) for ok in LEAVES[mine[0]]):
                    problems.append(f"{where}: {mine[0]} is a leaf and may import only itself"
                                    + (f" and {', '.join(LEAVES[mine[0]])}" if LEAVES[mine[0]] else ""))
            elif theirs[1] == -1:  # the core uses a leaf
                user = [n for n, _ in LAYERS].index(LEAF_USERS[theirs[0]])
                if mine[1] < user:
                    problems.append(f"{where}: only the {LEAF_USERS[theirs[0]]} layer and above use {theirs[0]}")
            elif theirs[1] > mine[1]:
                problems.append(f"{where}: upward, from layer {LAYERS[mine[1]][0]} to layer {LAYERS[theirs[1]][0]}")
    for cycle in _cycles(graph):
        problems.append("import cycle: " + " -> ".join(cycle + [cycle[0]]))
    return problems


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan), each as a list."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# --- the neutral-plan rule ---------------------------------------------------------------------

# Where Slurm's words may be, and why. Everything else speaks the plan (launchers/plan.py).
SLURM_WORDS: Dict[str, str] = {
    "hpclaunch.launchers.backends.slurm": "the Slurm backend",
    "hpclaunch.launchers.backends.slurm_script": "the Slurm backend: the plan in Slurm's terms",
    "hpclaunch.launchers.backends.slurm_status": "the Slurm backend",
    "hpclaunch.launchers.backends.slurm_facts": "the Slurm backend",
    "hpclaunch.launchers.backends.slurmcli": "the Slurm backend",
    "hpclaunch.launchers.backends.submitit": "submitit runs on Slurm: its parameters are Slurm's",
    "hpclaunch.launchers.backends.slurm_emulation": "the local backend's declared Slurm emulation",
    "hpclaunch.common.schedenv": "the scheduler variables' prefix, for the layers below the backends",
    "hpclaunch.train_entry.distenv": "the rank side's reader of the scheduler's (and starters') variables",
    # Node side, reading the job's environment: to fold into one reader (not yet done)
    "hpclaunch.monitors.ranks": "the monitor's reader of the job's GPUs and ranks",
    "hpclaunch.monitors.daemon": "the monitor's record of its job and step",
    "hpclaunch.monitors.prometheus": "the exporter's job labels",
    "hpclaunch.monitors.alerts": "an alert's job id and whether this node is the job's first",
}
_SLURM_WORD = re.compile(r"SBATCH|(?<![\w-])--(?:dependency|exclude)(?![\w-])|(?<![A-Za-z0-9_])SLURM_")


def _documentation(tree: ast.AST) -> Set[int]:
    """ids of the string nodes that are documentation: docstrings, and help= texts (argparse's and
    the schema's), which may name Slurm's words to the user."""
    out: Set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            out.update(id(n) for n in ast.walk(node.value))
    return out


def scheduler_words(sources: Dict[str, str]) -> List[str]:
    """Each string or name (comments, docstrings and help texts aside) holding one of Slurm's words
    in a module SLURM_WORDS does not name, one line each."""
    problems = []
    for module, source in sorted(sources.items()):
        if module in SLURM_WORDS:
            continue
        tree = ast.parse(source)
        docs = _documentation(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
            elif isinstance(node, ast.Name):
                text = node.id
            elif isinstance(node, ast.Attribute):
                text = node.attr
            elif isinstance(node, ast.alias):
                text = node.name
            else:
                continue
            found = _SLURM_WORD.search(text)
            if found:
                problems.append(f"{module}:{getattr(node, 'lineno', '?')}: {found.group(0)!r} ({text[:60]!r}) "
                                "outside the Slurm backend: translate the plan in the backend (tests/layers.py "
                                "SLURM_WORDS names where Slurm's words may be)")
    return problems
