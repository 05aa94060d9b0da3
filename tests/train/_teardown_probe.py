"""Runs train_entry's CLI and says whether the interpreter tore down afterwards
(tests/train/test_ddp_digits.py). argv[1]: ``entry`` leaves the way ``python -m
hpclaunch.train_entry`` does; ``script`` by ``sys.exit(main())``, as a script would.

An object that only teardown finalizes writes ``teardown-rank<N>`` into the run directory. Torch
2.13 can abort a finished DDP run in teardown (exit 134, docs/launch-modes.md), by chance, so the
test asserts that train_entry never gets there. One line goes to stdout unflushed: leaving without
teardown must not lose it."""
import os
import sys
import types

RUN_DIR = sys.argv[sys.argv.index("--run-dir") + 1]


class _TeardownMark:
    def __del__(self, _open=open, _path=os.path.join(RUN_DIR, f"teardown-rank{os.environ.get('RANK', 0)}")):
        _open(_path, "w").close()


# held by a module of its own, cleared when teardown clears every module
_holder = types.ModuleType("_teardown_probe_holder")
_holder.mark = _TeardownMark()
sys.modules[_holder.__name__] = _holder
del _holder

mode, args = sys.argv[1], sys.argv[2:]
print("PROBE: buffered stdout", os.environ.get("RANK", 0))  # no flush
if mode == "entry":
    from hpclaunch.train_entry.__main__ import run

    sys.argv[1:] = args
    run()
else:
    from hpclaunch.train_entry.cli import main

    sys.exit(main(args))
