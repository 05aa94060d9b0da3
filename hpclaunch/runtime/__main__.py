"""python -m hpclaunch.runtime --path | --version: where the job runtime is, and its version."""
import sys

from hpclaunch.runtime import VERSION, path

USAGE = "usage: python -m hpclaunch.runtime --path | --version"


def main(argv: list) -> int:
    if argv == ["--path"]:
        print(path())
    elif argv == ["--version"]:
        print(VERSION)
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
