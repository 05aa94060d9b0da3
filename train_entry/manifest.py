"""Reading a checkpoint directory as untrusted input: the one reader of ``manifest.json`` and of
the files it lists. Resume, prune and ``hpclaunch export`` all go through ``check``.

A run directory can be a colleague's on a shared filesystem, so nothing in it is trusted:
- the folder ``step-<N>`` is a real folder (not a link) and the manifest's ``step`` is N: a
  checkpoint copied in under another name is "foreign", never chosen nor pruned;
- the manifest is a regular file of at most MAX_MANIFEST_BYTES, JSON nested at most MAX_DEPTH
  deep (checked before parsing), whose fields have the types and ranges the writer gives them;
- each listed file is a plain name in the folder, a regular file opened without following links
  and without blocking (a FIFO, a device, a link or a folder is refused before a byte is read),
  of the listed size, and at most that many bytes are hashed.
Loading goes through ``open_member`` too, so what is loaded is the regular file that was checked.

ZeRO sharded checkpoints (issue 49) extend ``_check_fields`` (new fields) and ``_member_name``
(names in subfolders: open each folder with ``_open_dir``) here.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from typing import NamedTuple, Optional

from hpclaunch.spec.train import MODEL_SIZES

SCHEMA = "hpclaunch.checkpoint/1"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20   # room for a wide CSV's feature names (~1M of them)
MAX_DEPTH = 32                  # the writer nests 4 deep
MAX_FILES = 100_000             # one RNG file per rank
MAX_STEP = 10 ** 18             # broadcast between ranks as an int64
STEP_DIR = re.compile(r"step-(0|[1-9][0-9]{0,17})", re.ASCII)  # the writer's names: no sign, no leading zero
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_CHUNK = 1 << 20


class BadCheckpoint(ValueError):
    """Why a directory is not a usable checkpoint; ``foreign``: it is a checkpoint, of another step
    than its folder's name says (copied in under another name), so it is not this folder's."""

    def __init__(self, reason: str, foreign: bool = False):
        super().__init__(reason)
        self.foreign = foreign


class Verdict(NamedTuple):
    ok: bool
    reason: str
    manifest: Optional[dict]
    foreign: bool = False


def step_of(name: str) -> Optional[int]:
    """N for a folder named ``step-<N>`` as the writer names it; None for anything else (step-007)."""
    m = STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "a special file"


def _open_dir(path: str, dir_fd: Optional[int] = None) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise BadCheckpoint("not a folder (a symbolic link or a file)") from None
        raise BadCheckpoint(f"unreadable folder ({exc.strerror})") from None


def open_member(folder: str | int, name: str, size: Optional[int] = None) -> int:
    """A read-only fd of the regular file ``name`` inside ``folder`` (a path or a folder fd), never
    through a link and never blocking on a FIFO or device; BadCheckpoint otherwise, and when
    ``size`` is given and differs. FileNotFoundError passes through."""
    dfd = _open_dir(folder) if isinstance(folder, str) else folder
    try:
        try:  # lstat first: a device is not even opened (opening some has effects)
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise BadCheckpoint(f"{name} unreadable ({exc.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise BadCheckpoint(f"{name} is {_kind(st.st_mode)}, not a regular file")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:  # swapped for a link since the lstat: ELOOP
            raise BadCheckpoint(f"{name} unreadable ({exc.strerror})") from None
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise BadCheckpoint(f"{name} changed while it was opened")
        if size is not None and st2.st_size != size:
            os.close(fd)
            raise BadCheckpoint(f"size mismatch in {name} ({st2.st_size} != {size})")
        return fd
    finally:
        if dfd is not folder:
            os.close(dfd)


def _read_bounded(fd: int, limit: int, sink) -> int:
    """Feed at most ``limit`` + 1 bytes of ``fd`` to ``sink``; the count read (> limit: it grew)."""
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        sink(chunk)
        total += len(chunk)
    return total


def sha256_file(path: str) -> str:
    """sha256 of a file this process just wrote (the writer's side: no bound to apply)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _nested_deeper_than(text: str, depth: int) -> bool:
    """JSON nesting beyond ``depth`` (or unbalanced brackets), found before parsing: strings
    removed, then the innermost empty pairs, ``depth`` times, in C-speed passes."""
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(depth):
        if not skeleton:
            return False
        shorter = skeleton.replace("[]", "").replace("{}", "")
        if shorter == skeleton:  # unbalanced: json.loads says where, unless it would recurse that deep first
            return len(skeleton) > depth
        skeleton = shorter
    return bool(skeleton)


def parse_json_bounded(raw: bytes, what: str, limit: int = MAX_MANIFEST_BYTES, depth: int = MAX_DEPTH):
    """JSON of at most ``limit`` bytes nested at most ``depth`` deep; BadCheckpoint otherwise."""
    if len(raw) > limit:
        raise BadCheckpoint(f"unreadable {what} (over {limit >> 20} MiB)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadCheckpoint(f"unreadable {what} (not UTF-8: byte {exc.start})") from None
    if _nested_deeper_than(text, depth):
        raise BadCheckpoint(f"unreadable {what} (JSON nested more than {depth} deep)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadCheckpoint(f"unreadable {what} (not JSON: {str(exc).splitlines()[0][:120]})") from None


def _is_int(v, low: int = 0, high: int = MAX_STEP) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _member_name(name) -> bool:
    """A file of the folder itself: no path, no '..', no control characters."""
    return isinstance(name, str) and 0 < len(name) <= 255 and name not in (".", "..", MANIFEST) \
        and "/" not in name and name.isprintable()


def _check_fields(m) -> None:
    """The manifest's shape, as CheckpointStore writes it (older manifests lack the optional fields)."""
    if not isinstance(m, dict):
        raise BadCheckpoint("manifest is not a JSON object")
    if m.get("schema") != SCHEMA:
        raise BadCheckpoint(f"unknown schema {str(m.get('schema'))[:60]!r}")
    if not _is_int(m.get("step")):
        raise BadCheckpoint(f"manifest step is not a whole number 0..{MAX_STEP}")
    files = m.get("files")
    if not isinstance(files, dict) or len(files) > MAX_FILES:
        raise BadCheckpoint(f"manifest files is not a mapping of at most {MAX_FILES} files")
    for name, meta in files.items():
        if not _member_name(name):
            raise BadCheckpoint(f"manifest lists {name[:80]!r}, not a file name inside the checkpoint folder")
        if not isinstance(meta, dict) or not _is_int(meta.get("size"), 0, 1 << 62) \
                or not isinstance(meta.get("sha256"), str) or not _SHA256.fullmatch(meta["sha256"]):
            raise BadCheckpoint(f"manifest entry of {name} is not {{sha256: 64 hex digits, size: bytes}}")
    for key in ("epoch", "batch_in_epoch", "world_size"):
        if m.get(key) is not None and not _is_int(m[key]):
            raise BadCheckpoint(f"manifest {key} is not a whole number")
    for key in ("val_accuracy", "val_loss", "time_unix"):
        if m.get(key) is not None and not _is_number(m[key]):
            raise BadCheckpoint(f"manifest {key} is not a number")
    if m.get("model") is not None and not isinstance(m["model"], dict):
        raise BadCheckpoint("manifest model is not a JSON object")
    if m.get("format") not in (None, "sharded"):   # sharded: ZeRO stages 1-3 (sharded_checkpoint.py)
        raise BadCheckpoint(f"unknown checkpoint format {str(m.get('format'))[:40]!r}")
    for key, high in (("zero", 3), ("global_batch", MAX_STEP), ("accum_steps", MAX_STEP)):
        if m.get(key) is not None and not _is_int(m[key], 0, high):
            raise BadCheckpoint(f"manifest {key} is not a whole number 0..{high}")


def read_manifest(folder: str | int) -> dict:
    """The manifest of a checkpoint folder (a path or an fd), read bounded and its fields checked."""
    fd = open_member(folder, MANIFEST)
    try:
        chunks: list = []
        _read_bounded(fd, MAX_MANIFEST_BYTES, chunks.append)
    finally:
        os.close(fd)
    manifest = parse_json_bounded(b"".join(chunks), "manifest")
    _check_fields(manifest)
    return manifest


def _hash_member(dfd: int, name: str, meta: dict) -> None:
    fd = open_member(dfd, name, meta["size"])
    try:
        h = hashlib.sha256()
        if _read_bounded(fd, meta["size"], h.update) != meta["size"]:
            raise BadCheckpoint(f"size mismatch in {name} (it changed while it was read)")
    except OSError as exc:
        raise BadCheckpoint(f"unreadable {name} ({exc.strerror})") from None
    finally:
        os.close(fd)
    if h.hexdigest() != meta["sha256"]:
        raise BadCheckpoint(f"sha256 mismatch in {name}")


def check(path: str, step: Optional[int] = None) -> Verdict:
    """Whether ``path`` is a complete checkpoint: its manifest (of step ``step`` when given, else of
    the step its folder name says, if it says one) and every file listed, with its size and sha256."""
    if step is None:
        step = step_of(os.path.basename(os.path.normpath(path)))
    try:
        dfd = _open_dir(path)
    except BadCheckpoint as exc:
        return Verdict(False, str(exc), None)
    try:
        try:
            manifest = read_manifest(dfd)
        except FileNotFoundError:
            return Verdict(False, "no manifest (partial write)", None)
        if step is not None and manifest["step"] != step:
            raise BadCheckpoint(f"its manifest is of step {manifest['step']}, not {step} (a checkpoint copied in "
                                "under another name?)", foreign=True)
        for name, meta in manifest["files"].items():
            try:
                _hash_member(dfd, name, meta)
            except FileNotFoundError:
                raise BadCheckpoint(f"missing file {name}") from None
        return Verdict(True, "ok", manifest)
    except BadCheckpoint as exc:
        return Verdict(False, str(exc), None, exc.foreign)
    finally:
        os.close(dfd)


def verify(path: str) -> tuple[bool, str, Optional[dict]]:
    """(ok, reason, manifest) for one checkpoint directory."""
    return tuple(check(path)[:3])


_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
FACTORY = re.compile(f"{_NAME}:{_NAME}", re.ASCII)   # module:factory, as --model takes it
BUILTIN_MODELS = ("mlp", "transformer")   # model.build_model's names (this module imports no torch)

MAX_WIDTH = 1 << 31
MAX_LAYERS = 256


def _hidden(value) -> Optional[tuple]:
    """The MLP's hidden widths from "256,256" (or a list), or None if it is not that."""
    if _is_int(value, 1, MAX_WIDTH):
        return (value,)
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()] if len(value) <= 20 * MAX_LAYERS else None
        if parts is None or not all(p.isascii() and p.isdigit() and len(p) <= 10 for p in parts):
            return None
        value = [int(p) for p in parts]
    if not isinstance(value, list) or len(value) > MAX_LAYERS or not all(_is_int(w, 1, MAX_WIDTH) for w in value):
        return None
    return tuple(value)


def model_info(info) -> dict:
    """What rebuilds a checkpoint's model (the manifest's ``model``, which the trainer writes), its
    fields checked: BadCheckpoint naming the first that is not what the trainer writes."""
    if not isinstance(info, dict):
        raise BadCheckpoint("model is not a JSON object")
    spec = info.get("spec")
    if spec is not None and spec not in BUILTIN_MODELS and not (isinstance(spec, str) and len(spec) <= 200
                                                                 and FACTORY.fullmatch(spec)):
        raise BadCheckpoint("model.spec is not mlp, transformer or a module:factory name")
    if info.get("size") is not None and info["size"] not in MODEL_SIZES:
        raise BadCheckpoint(f"model.size is not one of {', '.join(MODEL_SIZES)}")
    hidden = _hidden(info.get("hidden") if info.get("hidden") is not None else "")
    if hidden is None:
        raise BadCheckpoint(f"model.hidden is not at most {MAX_LAYERS} comma-separated widths 1..{MAX_WIDTH}")
    dropout = info.get("dropout") or 0.0
    if not (_is_number(dropout) and 0 <= dropout < 1):
        raise BadCheckpoint("model.dropout is not a number in [0, 1)")
    out = {"spec": spec, "hidden": hidden, "dropout": float(dropout), "size": info.get("size")}
    for key, names in (("in_features", "feature_names"), ("num_classes", "classes")):
        if not _is_int(info.get(key), 1, MAX_WIDTH):
            raise BadCheckpoint(f"model.{key} is not a whole number 1..{MAX_WIDTH}")
        listed = info.get(names)
        if listed is not None and not (isinstance(listed, list) and len(listed) == info[key] and all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in listed)):
            raise BadCheckpoint(f"model.{names} is not a list of {info[key]} names ({key})")
        out[key], out[names] = info[key], listed
    for key in ("data", "label_column"):
        if info.get(key) is not None and not isinstance(info[key], str):
            raise BadCheckpoint(f"model.{key} is not a string")
        out[key] = info.get(key)
    if info.get("precision") not in (None, "fp32", "bf16", "fp16"):
        raise BadCheckpoint("model.precision is not fp32, bf16 or fp16")
    out["precision"] = info.get("precision")
    return out
