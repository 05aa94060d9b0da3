"""Crash-test writer: writes checkpoints with content derived from the step, forever.

Prints "committed <step>" after each save returns. Started and SIGKILLed by test_checkpoint.py.
Imports only the torch-free part of hpclaunch.train_entry.checkpoint (fast start).
"""
import hashlib
import sys

from hpclaunch.train_entry.checkpoint import CheckpointStore


def payload(step: int, name: str) -> bytes:
    seed = hashlib.sha256(f"{step}/{name}".encode()).digest()
    size = 50_000 + int.from_bytes(seed[:3], "big") % 400_000
    return (seed * (size // len(seed) + 1))[:size]


def main(root: str, start: int) -> None:
    store = CheckpointStore(root, keep=3)
    store.clean_temp()
    print("ready", flush=True)
    step = start
    while True:
        step += 1
        store.save(step, {"model.safetensors": payload(step, "model.safetensors"),
                          "trainer.pt": payload(step, "trainer.pt")},
                   {"rng-rank0.pt": payload(step, "rng-rank0.pt")}, {"epoch": 0, "world_size": 1})
        print(f"committed {step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
