"""CSV -> tensors, a seeded train/validation split, and a resumable distributed loader.

The whole CSV is held in memory (a reference trainer, not a data pipeline); batches
are gathered with one fancy-indexing call per batch (``BatchIndexDataset``) instead
of per-sample __getitem__ + collate.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler


from .config import DataError  # noqa: E402  (re-exported)


@dataclasses.dataclass
class TabularData:
    features: np.ndarray      # float32 [n, f]
    labels: np.ndarray        # int64 [n]
    feature_names: list
    classes: list             # original label values, index = class id

    @property
    def num_features(self) -> int:
        return self.features.shape[1]

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def load_data(spec: str, label_column: str = "label") -> TabularData:
    """--data: a CSV file, or a built-in data name (``digits``) when no file of that name exists."""
    from .digits import BUILTIN_DATA, digits_arrays

    if spec in BUILTIN_DATA and not os.path.exists(spec):
        x, y = digits_arrays()
        classes = np.unique(y)
        return TabularData(x.astype(np.float32), np.searchsorted(classes, y).astype(np.int64),
                           [f"f{i}" for i in range(x.shape[1])], classes.tolist())
    return load_csv(spec, label_column)


def load_csv(path: str, label_column: str = "label") -> TabularData:
    """Every problem is one DataError naming the file, the line or column, and the fix."""
    try:
        return _load_csv(path, label_column)
    except UnicodeDecodeError:
        offset, byte = _first_bad_utf8(path)
        raise DataError(f"{path}: not UTF-8 text: byte {offset} is 0x{byte:02x}; save the CSV as UTF-8") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory; give --data a CSV file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions, "
                        "or give --data a readable CSV file") from None


def _load_csv(path: str, label_column: str) -> TabularData:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path}: empty file") from None
        header = [h.strip() for h in header]
        if label_column not in header:
            raise DataError(f"{path}: no label column {label_column!r} (columns: {', '.join(header[:10])}"
                            f"{', ...' if len(header) > 10 else ''}); pick one with --label-column")
        li = header.index(label_column)
        if header.count(label_column) > 1:
            where = [str(j + 1) for j, h in enumerate(header) if h == label_column]
            raise DataError(f"{path}: the label column {label_column!r} appears {len(where)} times (columns "
                            f"{', '.join(where)}); rename all but one")
        if len(header) == 1:
            raise DataError(f"{path}: only the label column {label_column!r}, no feature columns; "
                            "add the features as further columns")
        names = [h for j, h in enumerate(header) if j != li]
        fast = _load_numeric(path, len(header))
        if fast is not None:  # every cell a number: numpy's C parser, ~20x faster than csv + float()
            y = fast[:, li]
            as_int = y.astype(np.int64) if (np.abs(y) <= MAX_LABEL).all() else None
            if as_int is not None and (as_int == y).all():  # else the csv path names the bad cell
                return _finish(path, label_column, np.delete(fast, li, axis=1).astype(np.float32),
                               as_int, names)
        rows, lines = [], []
        for r in reader:
            if r:
                rows.append(r)
                lines.append(reader.line_num)
    if not rows:
        raise DataError(f"{path}: no data rows")
    for r, line in zip(rows, lines):
        if len(r) != len(header):
            raise DataError(f"{path}: line {line} has {len(r)} fields, the header has {len(header)}; fix that row")
    try:
        table = np.array([[float(v) for j, v in enumerate(r) if j != li] for r in rows], dtype=np.float64)
    except ValueError:
        for r, line in zip(rows, lines):
            for j, v in enumerate(r):
                if j != li and not _is_float(v):
                    raise DataError(f"{path}: line {line}, column {header[j]!r}: {v.strip()!r} is not a number "
                                    "(non-numeric feature value); features must be numbers") from None
        raise DataError(f"{path}: non-numeric feature value; features must be numbers") from None
    bad = np.argwhere(~(np.abs(table) <= F32_MAX))  # NaN, inf, and what float32 cannot hold
    if len(bad):
        i, j = bad[0]
        what = "is not finite" if not math.isfinite(table[i, j]) else f"is beyond float32's range ({F32_MAX:.3g})"
        raise DataError(f"{path}: line {lines[i]}, column {names[j]!r}: feature value {table[i, j]:g} {what}; "
                        "fill, rescale or drop that row")
    raw = [r[li].strip() for r in rows]
    if all(_is_float(v) for v in raw):  # class ids
        ids = []
        for v, line in zip(raw, lines):
            x = float(v)
            if not (abs(x) <= MAX_LABEL and x == int(x)):
                raise DataError(f"{path}: line {line}, column {label_column!r}: label {v!r} is not a class id "
                                f"(a whole number within \u00b12**53); fix or drop that row")
            ids.append(int(x))
        return _finish(path, label_column, table.astype(np.float32), np.array(ids, dtype=np.int64), names)
    for v, line in zip(raw, lines):  # class names: an empty or NaN-like cell is a missing label, not a class
        if not v or (_is_float(v) and not math.isfinite(float(v))):
            raise DataError(f"{path}: line {line}, column {label_column!r}: label {v!r} is missing; "
                            "fill or drop that row")
    classes = sorted(set(raw))
    lookup = {c: i for i, c in enumerate(classes)}
    return TabularData(_nondegenerate(path, label_column, table.astype(np.float32), classes),
                       np.array([lookup[v] for v in raw], dtype=np.int64), names, classes)


# Class ids beyond 2**53 are not exact as the floats both parsers read them as.
MAX_LABEL = float(2 ** 53)
F32_MAX = float(np.finfo(np.float32).max)


def _finish(path, label_column, features, as_int, names) -> TabularData:
    classes = np.unique(as_int)
    return TabularData(_nondegenerate(path, label_column, features, classes.tolist()),
                       np.searchsorted(classes, as_int).astype(np.int64), names, classes.tolist())


def _nondegenerate(path, label_column, features, classes):
    if len(classes) < 2:
        raise DataError(f"{path}: every row has the same label ({classes[0]!r} in column {label_column!r}); a "
                        "classifier needs at least two classes (wrong --label-column?)")
    return features


def _is_float(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def _first_bad_utf8(path: str) -> tuple[int, int]:
    """(byte offset, byte value) of the first byte that is not UTF-8, read in blocks."""
    import codecs

    dec, done = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            pending = dec.getstate()[0]
            try:
                dec.decode(block)
            except UnicodeDecodeError as exc:
                data = pending + block
                return done - len(pending) + exc.start, data[exc.start]
            done += len(block)
        pending = dec.getstate()[0]
        try:
            dec.decode(b"", final=True)
        except UnicodeDecodeError as exc:  # a multi-byte sequence cut off by the end of the file
            return done - len(pending) + exc.start, pending[exc.start]
    return done, 0


def _load_numeric(path: str, columns: int) -> Optional[np.ndarray]:
    """The data rows as float64 when every cell parses as a number; None otherwise (quoted or
    non-numeric cells, ragged rows, no rows, values float32 cannot hold), and the csv path
    decides, with its own errors."""
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "loadtxt: input contained no data" is a warning
            table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2, encoding="utf-8")
    except (ValueError, UserWarning):
        return None
    if table.shape[0] == 0 or table.shape[1] != columns or not (np.abs(table) <= F32_MAX).all():
        return None
    return table


def split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded permutation -> (train indices, validation indices); same on every rank."""
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    perm = np.random.RandomState(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


class BatchIndexDataset(Dataset):
    """Map-style dataset whose __getitem__ takes a *list* of indices (used with a BatchSampler)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self.x[idx], self.y[idx]


class ResumableDistributedSampler(DistributedSampler):
    """DistributedSampler that can start ``start_index`` samples into the current epoch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_index = 0

    def set_position(self, epoch: int, start_index: int) -> None:
        self.set_epoch(epoch)
        self.start_index = start_index

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.start_index:])

    def __len__(self) -> int:
        return self.num_samples - self.start_index


class TrainLoader:
    """Batches of one rank's shard for one epoch, optionally skipping the consumed ones."""

    def __init__(self, x, y, batch_size: int, rank: int, world_size: int, seed: int,
                 workers: int = 0, pin_memory: bool = False):
        self.dataset = BatchIndexDataset(x, y)
        self.sampler = ResumableDistributedSampler(self.dataset, num_replicas=world_size, rank=rank,
                                                   shuffle=True, seed=seed, drop_last=True)
        self.batch_size = batch_size
        self.workers = workers
        self.pin_memory = pin_memory
        # The DataLoader draws its worker base seed from this generator, not from the global RNG,
        # so resuming mid-epoch leaves the global RNG (dropout) exactly where it was saved.
        self.generator = torch.Generator().manual_seed(seed + 7919 * rank)
        self.batches_per_epoch = self.sampler.num_samples // batch_size
        if self.batches_per_epoch == 0:
            raise DataError(f"batch size {batch_size} is larger than this rank's share of the training data "
                            f"({self.sampler.num_samples} samples); lower --batch-size")

    def epoch(self, epoch: int, skip_batches: int = 0):
        self.sampler.set_position(epoch, skip_batches * self.batch_size)
        bs = BatchSampler(self.sampler, self.batch_size, drop_last=True)
        return DataLoader(self.dataset, sampler=bs, batch_size=None, num_workers=self.workers,
                          pin_memory=self.pin_memory, generator=self.generator,
                          persistent_workers=False)


def val_shard(n_val: int, rank: int, world_size: int) -> np.ndarray:
    """Positions into the validation set for this rank: no padding, so sums over ranks are exact."""
    return np.arange(rank, n_val, world_size)


def make_tensors(data: TabularData, idx: np.ndarray):
    return torch.from_numpy(data.features[idx]), torch.from_numpy(data.labels[idx])
