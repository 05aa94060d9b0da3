"""Worker processes for a large report (reports/by_node.py): ``Pool(n).submit(fn, *args)`` runs a
module-level function in one of ``n`` Python processes and gives a future of its value.

Not multiprocessing's pools: their spawned workers run the caller's main script again (a user's
script without an ``if __name__ == "__main__"`` guard would start its report over in each worker),
and forked ones inherit pyarrow's threads mid-flight. These are fresh interpreters (this one's
executable and ``sys.path``) that import only what the tasks name, and speak pickle over their own
pipes: a task is (module, function, arguments), an answer its value or its exception. A worker that
dies fails the tasks it held with one line saying so; fewer than 2 workers run each task here.
"""
from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence

# The worker's first lines: sys.path from the parent, then serve() (this module, found on it).
_BOOT = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from hpclaunch.reports.workers import serve; serve()")


class Pool:
    """``submit(fn, *args) -> Future``, ``map(fn, arglist)`` in order; ``close()`` ends the workers."""

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._tasks: "queue.Queue[Optional[tuple]]" = queue.Queue()
        self._procs: List[subprocess.Popen] = []
        self._threads: List[threading.Thread] = []
        if self.workers < 2:
            return
        for _ in range(self.workers):
            p = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            pickle.dump(list(sys.path), p.stdin)
            p.stdin.flush()
            self._procs.append(p)
            th = threading.Thread(target=self._feed, args=(p,), daemon=True, name="hpclaunch-report-worker")
            th.start()
            self._threads.append(th)

    def submit(self, fn: Callable, *args) -> Future:
        fut: Future = Future()
        if not self._procs:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - the caller's result() raises it, as a worker's
                fut.set_exception(e)
            return fut
        self._tasks.put((fut, fn.__module__, fn.__qualname__, args))
        return fut

    def map(self, fn: Callable, arglist: Sequence[tuple]) -> List[Any]:
        return [f.result() for f in [self.submit(fn, *a) for a in arglist]]

    def _feed(self, p: subprocess.Popen) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            fut, module, name, args = task
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                pickle.dump((module, name, args), p.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                p.stdin.flush()
                ok, value = pickle.load(p.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as e:
                fut.set_exception(RuntimeError(f"a report worker (pid {p.pid}) stopped: {type(e).__name__}"))
                self._fail_rest(p)
                return
            (fut.set_result if ok else fut.set_exception)(value)

    def _fail_rest(self, p: subprocess.Popen) -> None:
        """A dead worker takes no more tasks; the others go on with the queue."""
        p.kill()
        if all(q.poll() is not None for q in self._procs):
            while True:
                try:
                    task = self._tasks.get_nowait()
                except queue.Empty:
                    return
                if task is not None:
                    task[0].set_exception(RuntimeError("every report worker stopped"))

    def close(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)
        for th in self._threads:
            th.join()
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
            p.wait()


def serve() -> None:
    """A worker's loop: tasks from stdin, answers to what was stdout (print goes to stderr)."""
    import importlib

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    while True:
        try:
            module, name, args = pickle.load(inp)
        except EOFError:
            return
        try:
            fn = importlib.import_module(module)
            for part in name.split("."):
                fn = getattr(fn, part)
            answer = (True, fn(*args))
        except BaseException as e:  # noqa: BLE001 - sent back, raised by the caller's result()
            answer = (False, e)
        try:
            pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            pickle.dump((False, RuntimeError(f"{module}.{name}: its answer cannot be sent: {e}")), out)
        out.flush()
