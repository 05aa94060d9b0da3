"""Sharded checkpoints (ZeRO stages 1-3): PyTorch's distributed checkpoint (DCP), as safetensors and
JSON only. Every rank writes its own shard; they are loaded at any world size (DCP reshards).

``checkpoints/step-<N>/`` of a sharded run (manifest ``format: sharded``):

| file | written by | content |
|---|---|---|
| ``shard-<R+1>-model-00001-of-00001.safetensors`` | each rank R with state to write | its pieces of the weights (``model.<name>``) and optimizer state (``optim.state.<name>.<key>``), each with its offsets in the whole tensor (DCP_SHARDING_INFO, JSON in the safetensors header) |
| ``trainer.json`` | rank 0 | optimizer hyperparameters per parameter group, LR scheduler, GradScaler, the loop's counters |
| ``rng-rank<R>.json`` | each rank | its python, numpy, torch (and CUDA) RNG states |
| ``manifest.json`` | rank 0, last | as for every checkpoint (checkpoint.py), with ``format``, ``zero``, ``global_batch``, ``accum_steps`` |

No pickle, on purpose. DCP's default FileSystemWriter stores its metadata as ``.metadata`` with
``pickle.dump``, and FileSystemReader loads it with ``pickle.load``: a file in the run directory that
runs code when a run resumes or is exported. DCP's safetensors form (HuggingFaceStorageWriter with
``save_distributed=True``, i.e. FileSystemWriter's ``SerializationFormat.SAFETENSORS``) writes no
metadata file at all: each shard's safetensors header (JSON) names its tensors, shapes, dtypes and
offsets, and ``ShardReader.read_metadata`` below rebuilds DCP's Metadata from those headers, reading
only the shards the verified manifest lists, through the descriptors manifest.open_member checked
(regular files, no links). Non-tensor state never enters DCP (DCP's planner loads such "bytes"
items with ``torch.load(weights_only=False)``): it goes to trainer.json.
"""
from __future__ import annotations

import base64
import json
import os
import re
from typing import NamedTuple, Optional

from . import checkpoint as ckpt
from . import manifest as mf

FORMAT = "sharded"
TRAINER = "trainer.json"
TRAINER_SCHEMA = "hpclaunch.trainer/1"
SHARD = re.compile(r"shard-(\d{5})-model-00001-of-00001\.safetensors", re.ASCII)
MAX_JSON_BYTES = 4 << 20      # trainer.json: a few numbers per parameter group
MAX_CHUNKS = 1 << 16          # pieces of one tensor (one per rank)


def shard_name(rank: int) -> str:
    return f"shard-{rank + 1:05d}-model-00001-of-00001.safetensors"   # DCP's name for rank R's shard


def rng_name(rank: int) -> str:
    return f"rng-rank{rank}.json"


def is_sharded(manifest: dict) -> bool:
    return manifest.get("format") == FORMAT


# --- the state DCP holds -----------------------------------------------------------------------

def _init_state(optimizer) -> None:
    """An optimizer's state made to exist (a step with zero gradients at lr 0, as torch's
    state_dict API does), so that a checkpoint can be loaded into it."""
    import torch

    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, lrs):
        g["lr"] = lr
    for p in params:
        p.grad = None


def dcp_state(model, optimizer, stage: int, for_loading: bool = False) -> dict:
    """{"model": {name: tensor}, "optim": {"state.<name>.<key>": tensor}}: the tensors (DTensor shards
    under FSDP2) DCP saves, or fills in place when loading. Names are the model's own, so a
    checkpoint of any stage 1-3 loads into any other, and into stage 0."""
    import torch

    if stage == 1:   # ZeroRedundancyOptimizer: this rank's local optimizer owns whole parameters
        inner = optimizer.optim
        if for_loading:
            _init_state(inner)
        names = {p: n for n, p in model.named_parameters()}
        optim = {f"state.{names[p]}.{k}": v for g in inner.param_groups for p in g["params"]
                 for k, v in inner.state.get(p, {}).items() if isinstance(v, torch.Tensor)}
        return {"model": model.state_dict(), "optim": optim}
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    osd = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True))
    return {"model": get_model_state_dict(model),
            "optim": {k: v for k, v in osd.items() if k.startswith("state.") and isinstance(v, torch.Tensor)}}


def _apply(model, optimizer, stage: int, loaded: dict) -> None:
    """After DCP filled ``loaded`` (from dcp_state(for_loading=True)): into the model and optimizer.
    Stage 1's tensors are the live ones, already filled."""
    if stage == 1:
        return
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)

    opts = StateDictOptions(flatten_optimizer_state_dict=True)
    set_model_state_dict(model, loaded["model"])
    full = get_optimizer_state_dict(model, optimizer, options=opts)
    full.update(loaded["optim"])
    set_optimizer_state_dict(model, optimizer, full, options=opts)


# --- writing -------------------------------------------------------------------------------------

def _json(obj) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def trainer_json(optimizer, sched, scaler, state: dict) -> bytes:
    """Everything but tensors: hyperparameters per parameter group (lr, betas, initial_lr, ...), the
    scheduler's and the scaler's state dicts, the loop's counters (epoch sums over all ranks)."""
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    return _json({"schema": TRAINER_SCHEMA, "param_groups": groups, "scheduler": sched.state_dict(),
                  "scaler": scaler.state_dict(), "state": state})


def _shard_writer(state_dict: dict, rank: int):
    """The payload that writes this rank's shard: ``dcp.save`` (collective: every rank calls it, first)."""
    def write(path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter

        try:
            dcp.save(state_dict, storage_writer=HuggingFaceStorageWriter(os.path.dirname(path), save_distributed=True))
        except CheckpointException as exc:  # raised on every rank when any failed: say whose, as an OSError
            failures = exc.failures
            own = failures.get(rank)
            first = own or next(iter(failures.values()), None)
            error = first[0] if isinstance(first, tuple) else first
            if isinstance(error, OSError):
                raise error from None
            raise OSError(5, f"DCP save failed on rank(s) {sorted(failures)}: {ckpt.first_line(error)}",
                          path) from None
    return write


def save_payloads(model, optimizer, sched, scaler, state: dict, rank: int, stage: int) -> tuple[dict, dict]:
    """(shared, per_rank) files of one checkpoint, for CheckpointStore.begin; the shard first (a
    collective: every rank reaches it before any other write can fail)."""
    per_rank = {shard_name(rank): _shard_writer(dcp_state(model, optimizer, stage), rank),
                rng_name(rank): _json(rng_state())}
    shared = {TRAINER: trainer_json(optimizer, sched, scaler, state)} if rank == 0 else {}
    return shared, per_rank


# --- reading -------------------------------------------------------------------------------------

def _load_json(path: str, what: str):
    folder, name = os.path.split(path)
    try:
        fd = mf.open_member(folder, name)
    except mf.BadCheckpoint as exc:
        raise ckpt.UnsafeCheckpoint(f"{folder}: {exc}") from None
    try:
        chunks: list = []
        mf._read_bounded(fd, MAX_JSON_BYTES, chunks.append)
    finally:
        os.close(fd)
    try:
        return mf.parse_json_bounded(b"".join(chunks), what, MAX_JSON_BYTES, 8)
    except mf.BadCheckpoint as exc:
        raise ckpt.UnsafeCheckpoint(f"{path}: {exc}") from None


class _Shards:
    """The shard files a verified manifest lists, held open (regular files, no links) while DCP reads
    them through /proc/self/fd: what is read is what was checked."""

    def __init__(self, path: str, manifest: dict):
        names = sorted(n for n in manifest["files"] if SHARD.fullmatch(n))
        if not names:
            raise ckpt.UnsafeCheckpoint(f"{path}: a sharded checkpoint without shard files")
        self.fds: list = []
        try:
            for name in names:
                self.fds.append(mf.open_member(path, name, manifest["files"][name]["size"]))
        except (mf.BadCheckpoint, FileNotFoundError) as exc:
            self.close()
            raise ckpt.UnsafeCheckpoint(f"{path}: {exc}") from None
        self.paths = [f"/proc/self/fd/{fd}" for fd in self.fds]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _tiles(size: tuple, chunks: list) -> bool:
    """Whether the chunks (offsets, sizes) lie inside ``size`` and cover it exactly once."""
    from math import prod

    if any(len(o) != len(size) or len(s) != len(size) or any(a < 0 or b < 0 or a + b > n for a, b, n in
                                                            zip(o, s, size)) for o, s in chunks):
        return False
    if sum(prod(s) for _, s in chunks) != prod(size):
        return False
    boxes = [(o, s) for o, s in chunks if prod(s)]
    if len(boxes) > 1024:   # beyond a thousand ranks: volumes only
        return True
    for i, (o1, s1) in enumerate(boxes):
        for o2, s2 in boxes[i + 1:]:
            if all(a1 < a2 + b2 and a2 < a1 + b1 for a1, b1, a2, b2 in zip(o1, s1, o2, s2)):
                return False
    return True


def _reader(shards: _Shards, folder: str):
    """A DCP StorageReader over the shard files (HuggingFaceStorageReader's data path), whose metadata
    comes from their safetensors headers, never from a pickle."""
    import torch
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import _getdtype
    from torch.distributed.checkpoint._hf_utils import CUSTOM_METADATA_KEY, SAVED_OFFSETS_KEY, _HFStorageInfo
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex, StorageMeta,
                                                       TensorProperties, TensorStorageMetadata)

    class ShardReader(HuggingFaceStorageReader):
        def read_metadata(self) -> Metadata:
            pieces: dict = {}   # name -> [(offsets, shape, dtype, file)]
            for path in shards.paths:
                try:
                    with safe_open(path, framework="pt") as f:
                        info = (f.metadata() or {}).get(CUSTOM_METADATA_KEY)
                        offsets = mf.parse_json_bounded(info.encode(), "DCP_SHARDING_INFO", MAX_JSON_BYTES << 4, 4) \
                            if info is not None else {}
                        for key in f.keys():
                            sl = f.get_slice(key)
                            shape, dtype = tuple(sl.get_shape()), _getdtype(sl.get_dtype())
                            off = (offsets.get(key) or {}).get(SAVED_OFFSETS_KEY, [0] * len(shape))
                            if not (isinstance(off, list) and all(mf._is_int(v, 0, 1 << 62) for v in off)):
                                raise mf.BadCheckpoint(f"offsets of {key[:80]} are not whole numbers")
                            pieces.setdefault(key, []).append((tuple(off), shape, dtype, path))
                except (SafetensorError, mf.BadCheckpoint, KeyError, AttributeError, TypeError) as exc:
                    raise ckpt.UnsafeCheckpoint(f"{folder}: a shard is not a usable DCP safetensors file "
                                                f"({ckpt.first_line(exc)})") from None
            sd_meta, storage = {}, {}
            for key, parts in pieces.items():
                size = tuple(max(o[i] + s[i] for o, s, _, _ in parts) for i in range(len(parts[0][1])))
                if len(parts) > MAX_CHUNKS or len({d for _, _, d, _ in parts}) != 1 \
                        or not _tiles(size, [(o, s) for o, s, _, _ in parts]):
                    raise ckpt.UnsafeCheckpoint(f"{folder}: the shards of {key[:80]} do not make one whole tensor")
                sd_meta[key] = TensorStorageMetadata(
                    properties=TensorProperties(dtype=parts[0][2]), size=torch.Size(size),
                    chunks=[ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s)) for o, s, _, _ in parts])
                for o, s, d, path in parts:
                    storage[MetadataIndex(fqn=key, offset=o)] = _HFStorageInfo(relative_path=path, shape=torch.Size(s),
                                                                                dtype=d)
            return Metadata(state_dict_metadata=sd_meta, storage_data=storage, storage_meta=StorageMeta(load_id=self.load_id))

    return ShardReader(folder)


def _mismatch(metadata, wanted: dict) -> Optional[str]:
    """The first way the checkpoint's tensors do not fit ``wanted`` ({dcp key: tensor}), in words."""
    saved = {k[6:]: list(v.size) for k, v in metadata.state_dict_metadata.items() if k.startswith("model.")}
    found = ckpt.shapes_mismatch(saved, {k: list(v.shape) for k, v in wanted["model"].items()})
    if found:
        return found
    missing = sorted(f"optim.{k}" for k in wanted["optim"] if f"optim.{k}" not in metadata.state_dict_metadata)
    if missing:
        return f"the checkpoint has no optimizer state {missing[0][6:]} (another --optimizer?)"
    return None


class Pending(NamedTuple):
    """A sharded checkpoint checked on this rank, ready for the collective load."""
    path: str
    manifest: dict
    trainer: dict
    wanted: dict


def _check_fit(path: str, shards: "_Shards", wanted: dict):
    reader = _reader(shards, path)
    why = _mismatch(reader.read_metadata(), wanted)
    if why:
        raise ckpt.UnsafeCheckpoint(f"the sharded state does not fit this run: {why[:200]} (another --model, "
                                    "--size, --hidden or --optimizer than the run that wrote it?)")
    return reader


def _load_dcp(path: str, manifest: dict, wanted: dict, no_dist: bool = False) -> None:
    """DCP fills ``wanted`` from the shards (collective unless ``no_dist``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    with _Shards(path, manifest) as shards:
        reader = _check_fit(path, shards, wanted)
        try:
            dcp.load(wanted, storage_reader=reader, no_dist=no_dist)
        except CheckpointException as exc:
            error = next(iter(exc.failures.values()), (exc,))
            raise ckpt.UnsafeCheckpoint(f"{path}: the shards could not be loaded "
                                        f"({ckpt.first_line(error[0] if isinstance(error, tuple) else error)})") from None


def _trainer_fields(tr, optimizer) -> dict:
    if not (isinstance(tr, dict) and tr.get("schema") == TRAINER_SCHEMA and isinstance(tr.get("state"), dict)
            and isinstance(tr.get("scheduler"), dict) and isinstance(tr.get("scaler"), dict)
            and isinstance(tr.get("param_groups"), list) and all(isinstance(g, dict) for g in tr["param_groups"])):
        raise ckpt.UnsafeCheckpoint(f"{TRAINER} is not a {TRAINER_SCHEMA} record")
    if len(tr["param_groups"]) != len(optimizer.param_groups):
        raise ckpt.UnsafeCheckpoint(f"{TRAINER} has {len(tr['param_groups'])} parameter groups, this optimizer "
                                    f"{len(optimizer.param_groups)}")
    return tr


def prepare(path: str, manifest: dict, model, optimizer, stage: int) -> Pending:
    """This rank's checks of a sharded checkpoint, no collective: trainer.json, the shards' headers,
    and that their tensors fit this model and optimizer. UnsafeCheckpoint when not."""
    try:
        tr = _trainer_fields(_load_json(os.path.join(path, TRAINER), TRAINER), optimizer)
    except FileNotFoundError:
        raise ckpt.UnsafeCheckpoint(f"{path}: no {TRAINER}") from None
    wanted = dcp_state(model, optimizer, stage, for_loading=True)
    with _Shards(path, manifest) as shards:
        _check_fit(path, shards, wanted)
    return Pending(path, manifest, tr, wanted)


def load(pending: Pending, model, optimizer, sched, scaler, stage: int) -> dict:
    """The checkpoint ``prepare`` checked, into this run at any world size (DCP reshards); collective.
    Returns the trainer state it holds."""
    path, tr = pending.path, pending.trainer
    _load_dcp(path, pending.manifest, pending.wanted)
    try:
        _apply(model, optimizer, stage, pending.wanted)
        for group, saved in zip(optimizer.param_groups, tr["param_groups"]):
            for key, value in saved.items():
                if key in group and key != "params":
                    group[key] = tuple(value) if isinstance(group[key], tuple) else value
        sched.load_state_dict(tr["scheduler"])
        scaler.load_state_dict(tr["scaler"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{path}: its optimizer state does not fit this run ({ckpt.first_line(exc)})") \
            from None
    return dict(tr["state"])


def saved_shapes(path: str, manifest: dict) -> dict:
    """{name: shape} of the model's tensors in a sharded checkpoint, from the shards' headers (no
    tensor is read)."""
    with _Shards(path, manifest) as shards:
        meta = _reader(shards, path).read_metadata()
    return {k[6:]: list(v.size) for k, v in meta.state_dict_metadata.items() if k.startswith("model.")}


def assemble(path: str, manifest: dict, model) -> None:
    """The whole model from a sharded checkpoint, in one process (``hpclaunch export``)."""
    _load_dcp(path, manifest, {"model": model.state_dict(), "optim": {}}, no_dist=True)


# --- RNG state as JSON ----------------------------------------------------------------------------

def rng_state() -> dict:
    import random

    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    out = {"python": [version, list(internal), gauss], "numpy": [kind, keys.tolist(), int(pos), int(has_gauss),
                                                                 float(cached)],
           "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available():
        out["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]
    return out


def set_rng_state_file(path: str) -> bool:
    """This rank's RNG state from ``path``; False if there is none (another world size)."""
    import random

    import numpy as np
    import torch

    try:
        rng = _load_json(path, "RNG state")
    except FileNotFoundError:
        return False
    try:
        version, internal, gauss = rng["python"]
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        random.setstate((version, tuple(internal), gauss))
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(rng["torch"], validate=True)),
                                             dtype=torch.uint8))
        if "cuda" in rng and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([torch.frombuffer(bytearray(base64.b64decode(s, validate=True)),
                                                           dtype=torch.uint8) for s in rng["cuda"]])
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ckpt.UnsafeCheckpoint(f"{path}: not an RNG state ({ckpt.first_line(exc)})") from None
    return True
