"""``python -m hpclaunch.train_entry.digits OUT.csv``: scikit-learn's digits as CSV.

1,797 8x8 images; features f0..f63 scaled to 0-1 (raw values are 0-16), then ``label``.
The same data without a file: ``--data digits`` (``BUILTIN_DATA``; a file of that name wins).
"""
from __future__ import annotations

import argparse
import sys


#: Data names train_entry's --data takes besides a CSV path (scikit-learn ships them; no download).
BUILTIN_DATA = {"digits": "scikit-learn's digits: 1,797 8x8 images, 64 features scaled to 0-1, 10 classes"}


def digits_arrays():
    """(features float [n, 64] in 0-1, labels int [n]): exactly the values the CSV holds."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data / 16.0, d.target


def write_digits_csv(path: str) -> int:
    """Atomically, through an exclusively created temporary file: OUT may be in /tmp, where a link
    planted at a predictable temporary name would have had another file overwritten."""
    from hpclaunch.common.atomic import write_atomic

    x, target = digits_arrays()
    lines = [",".join([f"f{i}" for i in range(x.shape[1])] + ["label"]) + "\n"]
    lines += [",".join(f"{v:.6g}" for v in row) + f",{int(label)}\n" for row, label in zip(x, target)]
    write_atomic(path, "".join(lines), mode=0o644)
    return len(target)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpclaunch.train_entry.digits")
    p.add_argument("out", help="CSV file to write")
    args = p.parse_args(argv)
    n = write_digits_csv(args.out)
    print(f"wrote {n} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
