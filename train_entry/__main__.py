"""``python -m hpclaunch.train_entry``: run the trainer, then leave without interpreter teardown.

Why os._exit: with torch 2.13, DDP keeps the gloo process group alive past destroy_process_group,
so its worker threads outlive it. A work they free late (a barrier's, holding an earlier all-reduce
whose thread state keeps a Python object) takes the GIL; if the interpreter is tearing down by then,
CPython ends that thread inside a noexcept destructor and the process aborts: "terminate called
without an active exception", SIGABRT, exit 134, after a finished run (the demo in CI of 2026-11-27;
15 of 150 two-rank runs of a bare DDP script here; docs/launch-modes.md). When main() returns or
raises SystemExit, everything is written and closed (checkpoints published, metrics closed, process
group destroyed): flushing what teardown would flush is all that is left. Any other exception takes
the normal path, a traceback and exit 1.
"""
import logging
import os
import sys

from .cli import main


def _exit_code(code) -> int:
    """What Python's own exit would make of a SystemExit code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run() -> None:
    try:
        code = main()
    except SystemExit as exc:  # argparse errors, RequeueExit (75), sys.exit in user hooks
        code = exc.code
    code = _exit_code(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
