"""Fuzz (issue 44), the checkpoint side of tests/test_fuzz_inputs.py: mutated manifests and
safetensors headers (and some trainer.pt files) in a run directory, fed in-process to
train_entry's resume (``resume_newest``, one rank) and to ``hpclaunch export``
(``hpclaunch.cli.main``). Each case ends in a correct result or a clear refusal, never a
traceback or a hang:
- resume always resumes, from the mutated checkpoint (step 2) when it verifies and loads, else from
  the valid one before it (step 1), naming why in one warning;
- export exits 0, or 2 with one printable line naming the run directory (the file, field and why);
- no case takes more than CASE_S (a SIGALRM; what hung before blocked in open() or read()).
The step-2 folder also holds a FIFO, a link to /dev/zero, a folder and a link out of the run
directory, for the mutations to name. ONNX conversion is replaced by a stub here (the model that
reaches it passed every check; tests/train/test_export.py runs the real one).

A fixed number of cases (the same seeds every run; HPCLAUNCH_FUZZ_RANDOM=1 explores others);
HARD_S only stops a run whose cases became pathologically slow. Prints "fuzz (checkpoints): N
cases, ..." with the outcomes, so a fuzz that only ever refuses shows.
"""
import collections
import contextlib
import hashlib
import io
import json
import logging
import os
import random
import signal
import struct
import time
import traceback

from test_checkpoint_untrusted import INFO

from hpclaunch.cli import main

CASES = 3_000          # ~4 ms of CPU each
HEADER_SHARE = 0.35    # of them: the weights' header mutated (the manifest rehashed to match)
TRAINER_SHARE = 0.1    # trainer.pt's bytes mutated (rehashed): resume's weights_only unpickler
EXPORT_NEWEST_EVERY = 10   # every 10th export without --step: the fallback to step 1
FULL_RESUME_EVERY = 20
CASE_S = 20            # a case slower than this is a hang (~10 ms is normal; a loaded machine stalls for seconds)
HARD_S = 240

VALUES = [0, 1, 2, -1, 7, 2 ** 31, 2 ** 63, 10 ** 30, -2 ** 70, 0.5, 1e308, float("nan"), float("inf"), True, False,
          None, "", "x", "2", "../../../outside.bin", "/dev/zero", "fifo", "zero-link", "dir", "outside-link",
          "manifest.json", ".", "..", "a/b", "os:abort", "planted:make", "\x00", "\u202e", "\n", "x" * 300,
          "256,256", "1," * 300, "-5", [], {}, [1, 2], {"a": 1}, [[[[[[]]]]]], {"sha256": "0" * 64, "size": 0},
          "hpclaunch.checkpoint/1", "fp16", "F32", "BOOL", [2, 3], [0, 10 ** 12], [-1, 4]]
SNIPPETS = [b"[" * 200, b"{" * 50, b"]", b"}", b"\x00", b"\xff", b"NaN", b"1e999", b"-", b'"', b"\\", b",",
            b'{"a":' * 40, b"null", b"9" * 5000, b"\xef\xbb\xbf", b"[" * 40_000 + b"]" * 40_000]
EXTRAS = ["fifo", "zero-link", "dir", "outside-link"]   # planted in step-2: a FIFO, a link to /dev/zero, ...


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _sha(data):
    return hashlib.sha256(data).hexdigest()


class Fixture:
    """run/checkpoints/step-1 (valid), step-2 (valid until a case mutates it), both of the MLP 8-4-3."""

    def __init__(self, tmp):
        import torch

        from hpclaunch.train_entry import checkpoint as ckpt
        from hpclaunch.train_entry.model import MLP

        self.rd = os.path.join(tmp, "run")
        self.root = os.path.join(self.rd, "checkpoints")
        store = ckpt.CheckpointStore(self.root, keep=5)
        self.files = {}
        for step in (1, 2):
            torch.manual_seed(step)
            model = MLP(8, 3, (4,), 0.0)
            opt, sched, scaler = self._trainer(model)
            state = {"step": step, "epoch": 0, "batch_in_epoch": step, "ep_loss": 0.0, "ep_correct": 0.0,
                     "ep_count": 0.0}
            store.save(step, {"model.safetensors": ckpt.save_weights_payload(model),
                              "trainer.pt": ckpt.torch_bytes({"optimizer": opt.state_dict(),
                                                              "scheduler": sched.state_dict(),
                                                              "scaler": scaler.state_dict(), "state": state})},
                       {"rng-rank0.pt": ckpt.torch_bytes(ckpt.rng_state())},
                       {"epoch": 0, "batch_in_epoch": step, "world_size": 1, "model": INFO})
        self.step2 = store.step_dir(2)
        for name in ("manifest.json", "model.safetensors", "trainer.pt"):
            with open(os.path.join(self.step2, name), "rb") as f:
                self.files[name] = f.read()
        outside = os.path.join(tmp, "outside.bin")
        with open(outside, "wb") as f:
            f.write(b"not this run's\n")
        os.mkfifo(os.path.join(self.step2, "fifo"))
        os.symlink("/dev/zero", os.path.join(self.step2, "zero-link"))
        os.mkdir(os.path.join(self.step2, "dir"))
        os.symlink(outside, os.path.join(self.step2, "outside-link"))
        self.written = dict(self.files)

    @staticmethod
    def _trainer(model):
        import torch

        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), torch.amp.GradScaler("cuda", enabled=False)

    def write(self, files):
        for name, data in files.items():
            if self.written.get(name) != data:
                with open(os.path.join(self.step2, name), "wb") as f:
                    f.write(data)
                self.written[name] = data


# --- mutations ----------------------------------------------------------------------------------

def _mutate_json(rng, manifest):
    """One value somewhere in the manifest replaced, deleted or added; or a listed file added."""
    doc = json.loads(json.dumps(manifest))
    op = rng.randrange(5)
    if op == 0:  # list something that is not one of the folder's regular files
        name = rng.choice(EXTRAS + ["/dev/zero", "../../../outside.bin", "../step-1/trainer.pt", "nope", "dir"])
        doc["files"][name] = {"sha256": _sha(b""), "size": rng.choice([0, 0, 15, 4096])}
        return doc
    node, key = doc, rng.choice(list(doc))
    while isinstance(node.get(key) if isinstance(node, dict) else node[key], (dict, list)) and rng.random() < 0.7:
        child = node[key]
        if not child:
            break
        node, key = child, (rng.choice(list(child)) if isinstance(child, dict) else rng.randrange(len(child)))
    if op == 1 and isinstance(node, dict):
        del node[key]
    elif op == 2 and isinstance(node, dict):
        node[rng.choice(["step", "files", "model", "schema", "extra", "val_accuracy", "epoch"])] = rng.choice(VALUES)
    else:
        node[key] = rng.choice(VALUES)
    return doc


def _mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(data))
        op = rng.randrange(4)
        if op == 0:
            data[pos:pos] = rng.choice(SNIPPETS)
        elif op == 1 and pos < len(data):
            data[pos] = rng.randrange(256)
        elif op == 2:
            del data[pos:pos + rng.randint(1, 30)]
        else:
            data = data[:pos]
    return bytes(data)


def _mutate_weights(rng, raw):
    """The safetensors file with its header (8-byte length + JSON) or its body mutated."""
    n = struct.unpack("<Q", raw[:8])[0]
    header, body = json.loads(raw[8:8 + n]), raw[8 + n:]
    op = rng.randrange(5)
    if op == 0:  # the length field
        return struct.pack("<Q", rng.choice([0, 1, n - 1, n + 1, len(raw), 1 << 40, (1 << 64) - 1,
                                             rng.randrange(1 << 64)])) + raw[8:]
    if op == 1:  # the header's bytes
        text = _mutate_bytes(rng, raw[8:8 + n])
        return struct.pack("<Q", len(text)) + text + body
    if op == 2:  # the body cut or grown
        return raw[:8 + n] + (body[:rng.randrange(len(body) + 1)] if rng.random() < 0.5 else body + b"\0" * 16)
    tensor = header[rng.choice([k for k in header if k != "__metadata__"])]
    field = rng.choice(["dtype", "shape", "data_offsets"])
    tensor[field] = rng.choice(VALUES + [[1 << 40, 1 << 40], [4, 8], [8, 4], [0], [], [2 ** 64], [3, -1],
                                         [0, 0], [0, 48], "F16", "I64", "U8"])
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _rehashed(manifest_bytes, name, data):
    try:
        doc = json.loads(manifest_bytes)
        doc["files"][name] = {"sha256": _sha(data), "size": len(data)}
        return json.dumps(doc).encode()
    except (ValueError, TypeError, KeyError):
        return manifest_bytes


# --- the two readers ----------------------------------------------------------------------------

def _resume(fx, full):
    """train_entry's resume on one rank: it must resume, from step 2 or step 1. Its choice is made
    every case; the loading (resume_newest) when step 2 is chosen, and every FULL_RESUME_EVERY-th
    case (loading the unchanged step 1 again tests nothing new, and costs ~15 ms)."""
    from hpclaunch.train_entry import checkpoint as ckpt
    from hpclaunch.train_entry.dist_init import Dist
    from hpclaunch.train_entry.distenv import detect
    from hpclaunch.train_entry.model import MLP
    from hpclaunch.train_entry.resume import resume_newest

    import torch

    store = ckpt.CheckpointStore(fx.root, rank=-1)
    found, skipped = store.valid_checkpoints()
    if not found or found[-1][0] != store.step_dir(1) or len(found) + len(skipped) != 2:
        return f"chose {[p for p, _ in found]}, skipped {skipped}", None
    if any("\n" in why or not why.isprintable() for _, why in skipped):
        return f"a reason that is not one printable line: {skipped}", None
    if found[0][0] == store.step_dir(1) and not full:
        return None, "resumed step-1"
    model = MLP(8, 3, (4,), 0.0)
    opt, sched, scaler = Fixture._trainer(model)
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "ep_loss": 0.0, "ep_correct": 0.0, "ep_count": 0.0}
    dist = Dist(detect({}), "none", torch.device("cpu"))
    path = resume_newest(dist, store, model, opt, sched, scaler, state)
    if path not in (store.step_dir(2), store.step_dir(1)):
        return f"resumed from {path!r}", None
    if state["step"] != int(path.rsplit("-", 1)[1]):
        return f"resumed {path} but at step {state['step']}", None
    return None, f"resumed {os.path.basename(path)}"


def _export(fx, newest):
    args = ["export", fx.rd] + ([] if newest else ["--step", "2"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    out, err = out.getvalue(), err.getvalue()
    if code == 0:
        ok = out.startswith("exported checkpoints/step-") and not err
        return (None, "exported") if ok else (f"exit 0: {out!r} {err!r}", None)
    if code != 2:
        return f"exit {code}: {err!r}", None
    line = err.rstrip("\n")
    if "\n" in line or not line.isprintable() or not line.startswith(fx.rd) or err.count("\n") != 1:
        return f"not one printable line naming the run directory: {err!r}", None
    return None, "export refused"


def test_fuzz_manifests_and_safetensors_headers(tmp_path, monkeypatch, capsys):
    from hpclaunch.train_entry import export

    monkeypatch.setattr(export, "to_onnx", lambda model, example, where: b"onnx")
    monkeypatch.setattr(export, "ort_check", lambda *a: {"skipped": "fuzz"})
    monkeypatch.chdir(tmp_path)
    logging.getLogger("hpclaunch.train_entry").setLevel(logging.ERROR)  # resume's warnings: one per case
    fx = Fixture(str(tmp_path))
    rng = random.Random(None if os.environ.get("HPCLAUNCH_FUZZ_RANDOM") else 44)
    manifest = json.loads(fx.files["manifest.json"])
    failures, outcomes = [], collections.Counter()
    previous = signal.signal(signal.SIGALRM, _alarm)
    start, cpu = time.monotonic(), time.process_time()
    cases, slowest = 0, 0.0
    try:
        while cases < CASES and time.monotonic() - start < HARD_S:
            cases += 1
            weights, trainer = fx.files["model.safetensors"], fx.files["trainer.pt"]
            draw = rng.random()
            if draw < TRAINER_SHARE:
                trainer = _mutate_bytes(rng, trainer)
                text = _rehashed(fx.files["manifest.json"], "trainer.pt", trainer)
            elif draw < TRAINER_SHARE + HEADER_SHARE:
                weights = _mutate_weights(rng, weights)
                text = _rehashed(fx.files["manifest.json"], "model.safetensors", weights) if rng.random() < 0.85 \
                    else fx.files["manifest.json"]
            elif rng.random() < 0.6:
                text = json.dumps(_mutate_json(rng, manifest), allow_nan=True).encode()
            else:
                text = _mutate_bytes(rng, fx.files["manifest.json"])
            fx.write({"manifest.json": text, "model.safetensors": weights, "trainer.pt": trainer})
            for name, call in (("resume", lambda: _resume(fx, cases % FULL_RESUME_EVERY == 0)),
                               ("export", lambda: _export(fx, cases % EXPORT_NEWEST_EVERY == 0))):
                signal.setitimer(signal.ITIMER_REAL, CASE_S)
                t = time.monotonic()
                try:
                    problem, outcome = call()
                    outcomes[outcome] += 1
                except _Hang:
                    problem = f"hung for {CASE_S} s"
                except BaseException:  # noqa: BLE001 - a traceback is the defect this test looks for
                    problem = traceback.format_exc()
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    slowest = max(slowest, time.monotonic() - t)
                if problem:
                    failures.append((name, text[:3000], weights[:200], problem))
        for name in os.listdir(fx.root):
            if name.startswith("step-") and name not in ("step-1", "step-2"):
                failures.append(("store", b"", b"", f"a folder appeared: {name}"))
    finally:
        signal.signal(signal.SIGALRM, previous)
    fuzz_s, cpu_s = time.monotonic() - start, time.process_time() - cpu
    with capsys.disabled():
        print(f"\nfuzz (checkpoints): {cases} cases, {len(failures)} tracebacks, hangs or malformed refusals "
              f"({', '.join(f'{k} {v}' for k, v in sorted((k, v) for k, v in outcomes.items() if k))}) "
              f"in {fuzz_s:.0f} s ({cpu_s:.0f} s of CPU; the slowest call {slowest:.2f} s)")
    if failures:
        name, text, weights, why = failures[0]
        raise AssertionError(f"{len(failures)} failures; the first, in {name}:\n{why}\nmanifest: {text!r}\n"
                             f"weights: {weights!r}")
    assert cases >= CASES, f"only {cases} cases in {HARD_S} s"
    assert os.path.isdir(fx.step2) and os.path.isdir(os.path.join(fx.root, "step-1"))

