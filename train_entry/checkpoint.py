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
only if its manifest parses and every listed file exists with the listed size and sha256
(``verify``); anything else (no manifest, a temp dir, a hash mismatch) is never chosen for resume.

This module's file layer does not import torch (the crash test's writer starts fast); the
state (de)serialisation helpers at the bottom import it lazily.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import threading
import time
from typing import Callable, Dict, Optional, Union

log = logging.getLogger("hpclaunch.train_entry")

SCHEMA = "hpclaunch.checkpoint/1"
MANIFEST = "manifest.json"
_STEP_RE = re.compile(r"^step-(\d+)$")

Payload = Union[bytes, Callable[[str], None]]   # bytes, or a function that writes the file at a path


from hpclaunch.common.atomic import fsync_dir as _fsync_dir  # noqa: E402 - one implementation for the project


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


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str) -> tuple[bool, str, Optional[dict]]:
    """(ok, reason, manifest) for one checkpoint directory."""
    mpath = os.path.join(path, MANIFEST)
    if not os.path.isfile(mpath):
        return False, "no manifest (partial write)", None
    try:
        with open(mpath) as f:
            manifest = json.load(f)
        files = manifest["files"]
        if manifest.get("schema") != SCHEMA:
            return False, f"unknown schema {manifest.get('schema')!r}", None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"unreadable manifest ({exc.__class__.__name__})", None
    for name, meta in files.items():
        fpath = os.path.join(path, name)
        try:
            size = os.path.getsize(fpath)
        except OSError:
            return False, f"missing file {name}", None
        if size != meta.get("size"):
            return False, f"size mismatch in {name} ({size} != {meta.get('size')})", None
        try:
            digest = sha256_file(fpath)
        except OSError as exc:
            return False, f"unreadable {name} ({exc})", None
        if digest != meta.get("sha256"):
            return False, f"sha256 mismatch in {name}", None
    return True, "ok", manifest


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
        checkpoint is never deleted to make room for it."""
        kept: list = []
        for step in self.list_steps():
            path = self.step_dir(step)
            if len(kept) < self.keep:
                if self._verified(path):
                    kept.append(step)
                continue
            shutil.rmtree(path, ignore_errors=True)
            self._checked.pop(path, None)

    def _verified(self, path: str) -> bool:
        """verify(), remembered per state of the directory (name, size and mtime of each file): a
        published checkpoint is hashed once, not at every prune, and any change is hashed again."""
        try:
            key = tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(path)))
        except OSError:
            return False
        if self._checked.get(path, (None,))[0] != key:
            self._checked[path] = (key, verify(path)[0])
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
        if not os.path.isdir(self.root):
            return []
        steps = []
        for name in os.listdir(self.root):
            m = _STEP_RE.match(name)
            if m and os.path.isdir(os.path.join(self.root, name)):
                steps.append(int(m.group(1)))
        return sorted(steps, reverse=True)

    def valid_checkpoints(self) -> tuple[list, list]:
        """([(path, manifest)] newest first, skipped [(path, reason)]) of every checkpoint that verifies."""
        found, skipped = [], []
        for step in self.list_steps():
            path = self.step_dir(step)
            ok, reason, manifest = verify(path)
            if ok:
                found.append((path, manifest))
            else:
                skipped.append((path, reason))
        return found, skipped

    def latest_valid(self) -> tuple[Optional[str], Optional[dict], list]:
        """(path, manifest, skipped) of the newest valid checkpoint; skipped = [(path, reason)]."""
        skipped = []
        for step in self.list_steps():
            path = self.step_dir(step)
            ok, reason, manifest = verify(path)
            if ok:
                return path, manifest, skipped
            skipped.append((path, reason))
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


def torch_load(path: str):
    """Tensors, numbers, strings and containers only (``weights_only=True``): a checkpoint is data,
    and a pickle that would run code (anyone who can write the run directory can also rewrite the
    manifest's hashes) is refused, never executed."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsafeCheckpoint(f"{path}: not loadable as plain data ({first[:200]}); it was not executed") from None


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
    from safetensors.torch import load_model

    load_model(model, path)


def weights_mismatch(model, path: str) -> Optional[str]:
    """The first way a weights file does not fit ``model``, in words (torch's own message is one
    line per tensor); None when no shape or name differs, or the file cannot be read."""
    try:
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            saved = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception:  # a damaged file: the caller's message stands
        return None
    own = {k: list(v.shape) for k, v in model.state_dict().items()}
    for name in sorted(saved.keys() & own.keys()):
        if saved[name] != own[name]:
            return f"{name} is {saved[name]} in the checkpoint but {own[name]} in this model"
    extra, missing = sorted(saved.keys() - own.keys()), sorted(own.keys() - saved.keys())
    for names, has, lacks in ((extra, "the checkpoint", "this model"), (missing, "this model", "the checkpoint")):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            return f"{has} has {names[0]}{more}, which {lacks} lacks"
    return None
