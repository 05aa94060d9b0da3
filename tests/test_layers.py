"""The house's layers hold: no upward import, no import cycle, no module over ~500 lines, and Slurm's
words only in the Slurm backend (and the modules tests/layers.py SLURM_WORDS names)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers  # noqa: E402

MAX_LINES = 520  # "no module over ~500 lines"


def test_the_package_keeps_its_layers_and_has_no_cycles():
    sources = layers.package_sources()
    assert "hpclaunch.spec.job" in sources and "hpclaunch.launchers.backends.base" in sources
    assert layers.check(sources) == []


def planted(module: str, code: str) -> list:
    """The check's findings on the real tree with `code` appended to `module`."""
    sources = layers.package_sources()
    sources[module] += "\n" + code
    return layers.check(sources)


def test_a_planted_upward_import_fails():
    found = planted("hpclaunch.spec.units", "\ndef later():\n    from hpclaunch.runs.registry import Registry\n")
    assert any("hpclaunch.spec.units" in p and "upward, from layer spec to layer runs" in p for p in found), found


def test_a_planted_cycle_fails_even_inside_a_function():
    # registry -> jobs is downward-legal (same layer), jobs already imports registry: a cycle.
    found = planted("hpclaunch.runs.registry", "\ndef later():\n    from hpclaunch.runs import jobs\n")
    assert any(p.startswith("import cycle:") and "hpclaunch.runs.jobs" in p and "hpclaunch.runs.registry" in p
               for p in found), found


def test_a_leaf_importing_the_core_fails():
    found = planted("hpclaunch.monitors.daemon", "from hpclaunch.common.errors import HpclaunchError\n")
    assert any("hpclaunch.monitors.daemon" in p and "is a leaf" in p for p in found), found
    # what a leaf may use is named module by module: common.atomic, not the rest of common
    assert planted("hpclaunch.monitors.daemon", "from hpclaunch.common.atomic import write_atomic\n") == []


def test_a_module_named_in_a_string_is_an_import():
    # The backend table and the other lazy loaders import by name: an upward name there is caught too.
    found = planted("hpclaunch.launchers.backends.choice", 'BACKENDS["x"] = ("hpclaunch.runs.jobs", "X")\n')
    assert any("hpclaunch.launchers.backends.choice" in p and "imports hpclaunch.runs.jobs" in p
               and "upward, from layer backends to layer runs" in p for p in found), found
    sources = layers.package_sources()
    seen = {t for t, _ in layers.imports_of("hpclaunch.launchers.backends.choice",
                                             sources["hpclaunch.launchers.backends.choice"], set(sources))}
    assert {"hpclaunch.launchers.backends.slurm", "hpclaunch.launchers.backends.local"} <= seen, seen


def test_the_cli_command_table_is_an_import_of_each_command_module():
    # cli/__init__ loads f"hpclaunch.cli.{name}" for each name in its table: each is an edge, so a
    # command module that imports the cli package back makes a cycle the check reports
    sources = layers.package_sources()
    seen = {t for t, _ in layers.imports_of("hpclaunch.cli", sources["hpclaunch.cli"], set(sources))}
    commands = {m for m in sources if m.startswith("hpclaunch.cli.") and m.endswith("_commands")}
    assert len(commands) >= 10 and commands | {"hpclaunch.cli.parser"} <= seen, commands - seen
    found = planted("hpclaunch.cli.run_commands", "\ndef later():\n    from hpclaunch.cli import main\n")
    assert any(p.startswith("import cycle:") and "hpclaunch.cli.run_commands" in p and "hpclaunch.cli -> " in p
               for p in found), found


def test_relative_imports_resolve_like_python():
    sources = {"hpclaunch.spec.a": "from .b import x\nfrom . import c\n", "hpclaunch.spec.b": "x = 1\n",
               "hpclaunch.spec.c": "from ..runs.r import y\n", "hpclaunch.runs.r": "y = 2\n"}
    found = layers.check(sources)
    assert found == ["hpclaunch.spec.c:1 imports hpclaunch.runs.r: upward, from layer spec to layer runs"], found


def test_no_module_is_over_the_size_limit():
    big = []
    for folder in layers.PACKAGE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(layers.ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8") as f:
                        n = sum(1 for _ in f)
                    if n > MAX_LINES:
                        big.append(f"{os.path.relpath(path, layers.ROOT)}: {n} lines")
    assert big == [], big


def test_slurms_words_stay_in_the_slurm_backend():
    sources = layers.package_sources()
    assert layers.scheduler_words(sources) == []
    # every module named may keep its words only while it has some: an entry outlives no move
    for module in layers.SLURM_WORDS:
        assert module in sources, module
        assert layers.scheduler_words({module: sources[module]}) == [] and \
            layers.scheduler_words({"x.y": sources[module]}), f"{module} names no Slurm word: drop it"


def words_planted(module: str, code: str) -> list:
    sources = layers.package_sources()
    sources[module] += "\n" + code
    return layers.scheduler_words(sources)


def test_a_planted_slurm_word_outside_the_backend_fails():
    for code in ('args = ["--dependency=afterok:1"]\n', 'args = [f"--exclude={nodes}"]\n',
                 'print("#SBATCH --nodes=2")\n', 'os.environ.get("SLURM_PROCID")\n', 'SLURM_STATES = {}\n'):
        found = words_planted("hpclaunch.runs.submission", code)
        assert len(found) == 1 and found[0].startswith("hpclaunch.runs.submission:"), (code, found)
    # the same in the Slurm backend's own modules is its business
    assert words_planted("hpclaunch.launchers.backends.slurm_script", 'x = "--exclude=c1"\n') == []


def test_documentation_and_lookalikes_are_not_slurms_words():
    code = ('def f():\n    """Slurm reads #SBATCH lines and SLURM_JOB_ID."""\n'
            '# --dependency in a comment\n'
            'p.add_argument("--x", help="like sbatch --exclude and SLURM_CONF")\n'
            'git = ["ls-files", "--exclude-standard"]\n'
            'knob = "HPCLAUNCH_SLURM_RETRIES"\n')
    assert words_planted("hpclaunch.runs.submission", code) == []
