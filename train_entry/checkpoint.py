"""Atomic, verifiable checkpoints: ``checkpoints/step-<N>/`` + ``manifest.json`` written last.

Write protocol, in three phases so that training waits only for the first:
  1. ``begin`` (every rank, on the training thread): write this rank's files (rank 0 also the
     shared ones) into ``.tmp-step-<N>``. Writing into the page cache is a memory copy; the
     state is captured at step N exactly. A thread then fsyncs the files.
  2. ``PendingSave.commit`` (collective, at a step every rank agrees on): join the fsync
     thread and agree that every rank's files are durable.
  3. publish (rank 0, in a thread): ``manifest.json`` (sha256 + size of every other file),
     fsync of the directory, rename to ``step-<N>``, fsync of ``checkpoints/``, prune to the
     newest K. ``PendingSave.wait`` joins it; nothing exits before it.
``CheckpointStore.save`` runs the three phases back to back. A directory counts as a checkpoint
only if it is a real folder named ``step-<N>``, its manifest is of step N, and every listed file
is a regular file with the listed size and sha256 (``manifest.check``, which reads the run
directory as hostile input); anything else (no manifest, a temp dir, a hash mismatch, a FIFO, a
checkpoint copied in under another step's name) is never chosen for resume.

This module's file layer does not import torch (the crash test's writer starts fast); the
state (de)serialisation helpers at the bottom import it lazily.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import threading
import time
from typing import Callable, Dict, Optional, Union

from hpclaunch.common.atomic import fsync_dir as _fsync_dir  # one implementation for the project

from . import manifest as mf
from .manifest import MANIFEST, SCHEMA, check, sha256_file, step_of, verify  # noqa: F401 - this module's API

log = logging.getLogger("hpclaunch.train_entry")

Payload = Union[bytes, Callable[[str], None]]   # bytes, or a function that writes the file at a path


class CheckpointError(RuntimeError):
    """A checkpoint could not be made durable (the message names the rank, the file and why)."""


def _why(exc: BaseException) -> str:
    """'No space left on device (/path/file)' rather than '[Errno 28] ...'; the path is the fix's hint."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def write_unsynced(path: str, payload: Payload) -> None:
    if callable(payload):
        payload(path)
    else:
        with open(path, "wb") as f:
            f.write(payload)


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)  # fsync after the fact also covers files written by a callable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, payload: Payload) -> None:
    write_unsynced(path, payload)
    fsync_file(path)


class CheckpointStore:
    def __init__(self, root: str, keep: int = 3, rank: int = 0, barrier: Callable[[], None] = lambda: None):
        self.root = root
        self.keep = keep
        self.rank = rank
        self.barrier = barrier
        self._checked: Dict[str, tuple] = {}   # path -> ((manifest mtime, size), verified)
        if rank == 0:
            os.makedirs(root, exist_ok=True)

    def step_dir(self, step: int) -> str:
        return os.path.join(self.root, f"step-{step}")

    def tmp_dir(self, step: int) -> str:
        return os.path.join(self.root, f".tmp-step-{step}")

    # -- writing ------------------------------------------------------------------------------
    def begin(self, step: int, shared: Dict[str, Payload], per_rank: Dict[str, Payload],
              meta: Optional[dict] = None) -> "PendingSave":
        """Phase 1 (every rank; rank 0 also passes ``shared``): the files, not yet durable."""
        tmp = path = self.tmp_dir(step)
        paths, error = [], None
        try:
            os.makedirs(tmp, exist_ok=True)  # every rank: no barrier needed before writing into it
            for name, payload in {**per_rank, **(shared if self.rank == 0 else {})}.items():
                path = os.path.join(tmp, name)
                write_unsynced(path, payload)
                if not callable(payload) or os.path.exists(path):  # a DCP shard: none for a rank with nothing to save
                    paths.append(path)
        except OSError as exc:  # disk full, quota: every rank learns of it at the commit, together
            if exc.filename is None:  # a failed write() names no file; the message should
                exc.filename = path
            error = exc
        return PendingSave(self, step, paths, meta or {}, error)

    def save(self, step: int, shared: Dict[str, Payload], per_rank: Dict[str, Payload],
             meta: Optional[dict] = None, agree_failed: Callable[[bool], bool] = bool) -> str:
        """All three phases, collective: returns once ``step-<N>`` is published."""
        pending = self.begin(step, shared, per_rank, meta)
        pending.commit(agree_failed)
        pending.wait(agree_failed)
        self.barrier()
        return pending.final

    def _publish(self, step: int, meta: dict) -> None:
        """Phase 3 (rank 0): manifest last, then the atomic rename. A failure before the rename
        (a full disk under the manifest) removes the temp dir and leaves every published one as it was."""
        tmp, final = self.tmp_dir(step), self.step_dir(step)
        trash = None
        try:
            files = {}
            for name in sorted(os.listdir(tmp)):
                p = os.path.join(tmp, name)
                files[name] = {"sha256": sha256_file(p), "size": os.path.getsize(p)}
            manifest = {"schema": SCHEMA, "step": step, "time_unix": time.time(), "files": files, **meta}
            write_file(os.path.join(tmp, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())
            _fsync_dir(tmp)
            if os.path.exists(final):           # e.g. re-saved after a resume: move the old one aside first
                trash = os.path.join(self.root, f".old-step-{step}-{os.getpid()}")
                os.rename(final, trash)
            os.rename(tmp, final)
        except BaseException:
            if trash is not None and not os.path.exists(final):
                os.rename(trash, final)         # the old one back: it was never deleted
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        _fsync_dir(self.root)
        self.prune()

    def discard(self, step: int) -> None:
        """Remove a checkpoint's temp dir (rank 0, once no rank writes into it any more)."""
        shutil.rmtree(self.tmp_dir(step), ignore_errors=True)

    def prune(self) -> None:
        """Keep the newest ``keep`` checkpoints that verify; drop valid ones older than those, and
        invalid directories older than the oldest kept. A directory that does not verify (a torn
        or tampered one, another run's) never counts toward ``keep``, so the newest valid
        checkpoint is never deleted to make room for it; a foreign one (a checkpoint whose manifest
        names another step than its folder) is not this run's and is left alone."""
        kept: list = []
        for step in self.list_steps():
            path = self.step_dir(step)
            verdict = self._verified(path)
            if verdict.foreign:
                continue
            if len(kept) < self.keep:
                if verdict.ok:
                    kept.append(step)
                continue
            shutil.rmtree(path, ignore_errors=True)
            self._checked.pop(path, None)

    def _verified(self, path: str) -> mf.Verdict:
        """check(), remembered per state of the directory (name, size and mtime of each entry, links
        not followed): a published checkpoint is hashed once, not at every prune, and any change is
        hashed again."""
        try:
            key = tuple(sorted((e.name, e.stat(follow_symlinks=False).st_size,
                                e.stat(follow_symlinks=False).st_mtime_ns) for e in os.scandir(path)))
        except OSError:
            return mf.Verdict(False, "unreadable", None)
        if self._checked.get(path, (None,))[0] != key:
            self._checked[path] = (key, check(path))
        return self._checked[path][1]

    def start_new_lineage(self) -> Optional[str]:
        """A run that does not resume (--no-resume) into a folder with checkpoints: move them aside
        (never deleted) into ``previous-<time>/``, so that neither prune nor a later resume mixes
        them with this run's. Returns where they went, or None."""
        steps = self.list_steps()
        if not steps:
            return None
        aside = os.path.join(self.root, time.strftime("previous-%Y%m%dT%H%M%S", time.gmtime()))
        n, base = 1, aside
        while os.path.exists(aside):
            aside, n = f"{base}-{n}", n + 1
        os.makedirs(aside)
        for step in steps:
            os.rename(self.step_dir(step), os.path.join(aside, f"step-{step}"))
        _fsync_dir(aside)
        _fsync_dir(self.root)
        return aside

    def clean_temp(self) -> None:
        """Remove leftovers of interrupted writes (rank 0, before training starts)."""
        if not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.startswith((".tmp-step-", ".old-step-")):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    # -- reading ------------------------------------------------------------------------------
    def list_steps(self) -> list:
        """Steps of the folders named ``step-<N>`` as the writer names them (real folders, not links), newest first."""
        return [step for step, _ in self._scan()[0]]

    def _scan(self) -> tuple[list, list]:
        """([(step, path)] of the checkpoint folders, [(path, why)] of the names that look like one but
        are not: step-007, a link; nothing here ever moves or deletes those)."""
        found, strays = [], []
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return [], []
        for e in entries:
            if not e.name.startswith("step-"):
                continue
            step = step_of(e.name)
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if step is not None and is_dir:
                found.append((step, e.path))
            elif e.is_symlink():
                strays.append((e.path, "a symbolic link, not a checkpoint folder: ignored"))
            elif is_dir:
                strays.append((e.path, "not a checkpoint folder name (step-<N>, N without leading zeros): ignored"))
        found.sort(reverse=True)
        return found, sorted(strays)

    def valid_checkpoints(self) -> tuple[list, list]:
        """([(path, manifest)] newest first of every checkpoint that verifies, [(path, reason)] of the
        rest: torn, tampered and foreign ones, and the strays of ``_scan``)."""
        found, skipped = [], []
        steps, strays = self._scan()
        for step, path in steps:
            verdict = check(path, step)
            if verdict.ok:
                found.append((path, verdict.manifest))
            else:
                skipped.append((path, verdict.reason + ("; ignored, never pruned" if verdict.foreign else "")))
        return found, skipped + strays

    def latest_valid(self) -> tuple[Optional[str], Optional[dict], list]:
        """(path, manifest, skipped) of the newest valid checkpoint; skipped = [(path, reason)]."""
        skipped = []
        for step in self.list_steps():
            path = self.step_dir(step)
            verdict = check(path, step)
            if verdict.ok:
                return path, verdict.manifest, skipped
            skipped.append((path, verdict.reason))
        return None, None, skipped


class _Worker:
    """A thread that runs one function and keeps its exception for whoever joins it."""

    def __init__(self, fn, name: str):
        self.error: Optional[BaseException] = None

        def run():
            try:
                fn()
            except BaseException as exc:  # handed to the training thread at join()
                self.error = exc

        # not a daemon: an interpreter that exits normally still finishes the fsync / publish
        self.thread = threading.Thread(target=run, name=name)
        self.thread.start()

    def join(self) -> Optional[BaseException]:
        self.thread.join()
        return self.error


class PendingSave:
    """A checkpoint whose files are written; ``commit`` then ``wait`` make it durable and visible."""

    def __init__(self, store: CheckpointStore, step: int, paths: list, meta: dict,
                 write_error: Optional[BaseException] = None):
        self.store, self.step, self.meta = store, step, meta
        self.final = store.step_dir(step)
        self.committed = False
        self._publisher: Optional[_Worker] = None
        self._write_error = write_error
        self._fsync = None if write_error else _Worker(lambda: [fsync_file(p) for p in paths], f"ckpt-fsync-{step}")

    def commit(self, agree_failed: Callable[[bool], bool]) -> None:
        """Phase 2, collective: ``agree_failed(local_failed)`` must return True on every rank if
        any rank failed (an all-reduce of the flag), so all ranks raise together instead of
        some waiting at a barrier for a rank that died."""
        if self.committed:
            return
        error = self._write_error or self._fsync.join()
        if agree_failed(error is not None):
            # every rank has joined its writes to reach the agreement: the temp dir can go
            if self.store.rank == 0:
                self.store.discard(self.step)
            raise CheckpointError(f"checkpoint step {self.step} not written: "
                                  + (f"rank {self.store.rank}: {_why(error)}" if error else "another rank could not "
                                     "write its files (see that rank's log)")
                                  + f"; the checkpoints already in {self.store.root} are untouched") from error
        self.committed = True
        if self.store.rank == 0:
            self._publisher = _Worker(lambda: self.store._publish(self.step, self.meta), f"ckpt-publish-{self.step}")

    def wait(self, agree_failed: Optional[Callable[[bool], bool]] = None) -> None:
        """Rank 0: block until the checkpoint is published. With ``agree_failed`` (collective, as
        in ``commit``) every rank learns whether rank 0 could publish it, and all raise together."""
        error = None
        if self._publisher is not None:
            error, self._publisher = self._publisher.join(), None
        if (agree_failed(error is not None) if agree_failed else error is not None):
            raise CheckpointError(f"checkpoint step {self.step} not written: "
                                  + (_why(error) if error else "rank 0 could not publish it (see its log)")
                                  + f"; the checkpoints already in {self.store.root} are untouched") from error

    def abandon(self, agree: Callable[[bool], bool]) -> None:
        """Collective, instead of the commit: drop this checkpoint unpublished (its state is not to be kept)."""
        assert not self.committed, "a committed checkpoint is published, not abandoned"
        if self._fsync is not None:
            self._fsync.join()
        agree(False)  # every rank is past its writes before rank 0 removes the directory
        if self.store.rank == 0:
            self.store.discard(self.step)


# --- state (de)serialisation (torch, lazily) ---------------------------------------------------

def torch_bytes(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class UnsafeCheckpoint(CheckpointError):
    """A checkpoint file that cannot be loaded without running code from it, or does not fit."""


def printable(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` with what a terminal would act on escaped: names and messages
    from a checkpoint's files reach a log line."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, printable (a library may quote bytes of the file)."""
    text = str(exc).strip()
    return printable(text.splitlines()[0] if text else type(exc).__name__)


@contextlib.contextmanager
def checked_file(path: str):
    """``path``, a file of a checkpoint folder, as ``/proc/self/fd/N`` of the regular file opened
    without following a link or blocking (manifest.open_member): a library that then opens it
    reads that file, not a FIFO or device swapped in under its name since it was verified.
    UnsafeCheckpoint for anything but a regular file; FileNotFoundError passes through."""
    folder, name = os.path.split(path)
    try:
        fd = mf.open_member(folder, name)
    except mf.BadCheckpoint as exc:
        raise UnsafeCheckpoint(f"{folder}: {exc}") from None
    try:
        yield f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else path
    finally:
        os.close(fd)


def torch_load(path: str):
    """Tensors, numbers, strings and containers only (``weights_only=True``): a checkpoint is data,
    and a pickle that would run code (anyone who can write the run directory can also rewrite the
    manifest's hashes) is refused, never executed."""
    import torch

    with checked_file(path) as readable:
        try:
            return torch.load(readable, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - garbled bytes fail in any way (IndexError, EOFError, ...)
            raise UnsafeCheckpoint(f"{path}: not loadable as plain data ({first_line(exc)}); it was not "
                                   "executed") from None


def rng_state() -> dict:
    import random

    import numpy as np
    import torch

    # numpy's state as a tensor and plain numbers: weights_only loading refuses numpy objects
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                    int(has_gauss), float(cached)],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def save_weights_payload(model) -> Callable[[str], None]:
    def _write(path: str) -> None:
        from safetensors.torch import save_model

        try:
            save_model(model, path)
        except OSError:
            raise
        except Exception as exc:  # SafetensorError "... (os error 28)": an OSError, for begin() to catch
            m = re.search(r"os error (\d+)", str(exc))
            if not m:
                raise
            code = int(m.group(1))
            raise OSError(code, os.strerror(code), path) from None

    return _write


def load_weights(model, path: str) -> None:
    """The safetensors file at ``path`` into ``model`` (strict: RuntimeError when it does not fit);
    UnsafeCheckpoint when it is no regular file or no safetensors file (a header too large, offsets
    past its end, shapes that overflow: the library checks them all before allocating)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    with checked_file(path) as readable:
        try:
            load_model(model, readable)
        except SafetensorError as exc:
            raise UnsafeCheckpoint(f"{path}: not a usable safetensors file ({first_line(exc)})") from None


def weights_shapes(path: str) -> dict:
    """{tensor name: shape} from a safetensors file's header (no tensor is read); UnsafeCheckpoint
    when it cannot be read as one."""
    from safetensors import SafetensorError, safe_open

    with checked_file(path) as readable:
        try:
            with safe_open(readable, framework="pt") as f:
                return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
        except SafetensorError as exc:
            raise UnsafeCheckpoint(f"{path}: not a usable safetensors file ({first_line(exc)})") from None


def weights_mismatch(model, path: str, this: str = "this model") -> Optional[str]:
    """The first way a weights file does not fit ``model`` (which may live on the meta device), in
    words (torch's own message is one line per tensor); None when no shape or name differs, or the
    file cannot be read."""
    try:
        saved = weights_shapes(path)
    except (UnsafeCheckpoint, OSError):  # a damaged file: the caller's message stands
        return None
    return shapes_mismatch(saved, {k: list(v.shape) for k, v in model.state_dict().items()}, this)


def shapes_mismatch(saved: dict, own: dict, this: str = "this model") -> Optional[str]:
    """weights_mismatch on {name: shape} of the file (``saved``) and of the model (``own``)."""
    for name in sorted(saved.keys() & own.keys()):
        if saved[name] != own[name]:
            return f"{printable(name, 100)} is {saved[name]} in the checkpoint but {own[name]} in {this}"
    extra, missing = sorted(saved.keys() - own.keys()), sorted(own.keys() - saved.keys())
    for names, has, lacks in ((extra, "the checkpoint", this), (missing, this, "the checkpoint")):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            return f"{has} has {printable(names[0], 100)}{more}, which {lacks} lacks"
    return None
