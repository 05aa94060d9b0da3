"""Errors that reach the user as clear one-line messages, never as tracebacks."""
from __future__ import annotations


class Problem:
    """One thing wrong with the input: where, what, the offending value, and the fix.

    A plain class, not a dataclass: every command imports this module, and `--help` should not pay
    for `dataclasses` (and the `inspect` it imports) to print usage."""

    __slots__ = ("source", "path", "message", "value", "fix", "has_value")

    def __init__(self, source: str, path: str, message: str, value: object = None, fix: str = "",
                 has_value: bool = True) -> None:
        self.source = source      # the file (or "command line") the value came from
        self.path = path          # dotted field path, e.g. "resources.nodes"
        self.message = message    # what is wrong
        self.value = value
        self.fix = fix
        self.has_value = has_value

    def _key(self) -> tuple:
        return (self.source, self.path, self.message, repr(self.value), self.fix, self.has_value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Problem({str(self)!r})"

    def __str__(self) -> str:
        where = f"{self.source}: {self.path}: " if self.path else f"{self.source}: "
        text = where + self.message
        if self.has_value:
            text += f" ({_show(self.value)})"
        if self.fix:
            text += f" \u2014 {self.fix}"
        return _one_line(text)


def _one_line(text: str) -> str:
    # Keys and values from the file may hold newlines or other control characters: escaped, the
    # problem stays one line (the value itself is already shown as repr).
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else _plain(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if not isinstance(value, (int, float)) else str(value)


class HpclaunchError(Exception):
    """An error caused by the user's input or environment: printed as one line, exit code 2."""

    exit_code = 2


class InvalidInput(HpclaunchError):
    """Input failed validation; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
