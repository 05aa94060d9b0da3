import logging
import os
import sys

from .cli import main

try:
    code = main()
except SystemExit as exc:  # the requeue exit (75) and argparse's usage errors
    if isinstance(exc.code, str):
        print(exc.code, file=sys.stderr)
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
# Everything is written and closed (checkpoints published, metrics closed, process group destroyed):
# skip interpreter finalization, where gloo's C++ threads can abort the process after a successful
# run ("terminate called without an active exception", SIGABRT; see pytorch/pytorch PR #179291),
# which torchrun would report as a failed job. Uncaught errors still exit through Python.
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
