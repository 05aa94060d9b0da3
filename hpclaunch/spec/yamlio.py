"""hpclaunch's YAML files: read safely and boundedly, parsed once, and the run directory's job.yaml written.

Job files and profiles are read by people who did not write them, so reading is bounded before
any work is done on the content: only regular files, at most MAX_FILE_BYTES, UTF-8; the parse
itself (PyYAML's C parser, a bounded composer, duplicate keys refused, one-line errors) is
yamlparse.py's, with the bounds on values, text and depth.

PyYAML costs ~15 ms to import, a sixth of a submission. The cache below is there for the budget
`hpclaunch render` <= 1.3x `python -c 'import jinja2, yaml'` (docs/benchmarks.md): on wheel
installs, 30 interleaved rounds on the shared 2-core machine (CPU-time medians, wall in brackets),
render is 1.08x (1.14x) that floor with it and 1.26x (1.29x) without, at the budget's edge; a
submission saves ~20 ms of CPU with it. So a file's document is kept in the user
cache (hpclaunch/common/usercache.py, as JSON) under its whole text, which it is read back for only
when the text is the same, byte for byte; and documents of plain values (mappings with text keys, lists,
text, numbers, booleans, null: every job.yaml) are written by a small writer here whose output
PyYAML reads back as the same values (tests/test_yamlio.py). A submission of a job file submitted
before then imports no PyYAML.
"""
from __future__ import annotations

import os
import stat
import re
from typing import Any

from hpclaunch.common import usercache
from hpclaunch.common.errors import HpclaunchError

MAX_FILE_BYTES = 1 << 20      # 1 MiB: job files and profiles


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_input_file(path: str, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a job file or profile the user named: a regular file of at most `limit` bytes,
    else one HpclaunchError line naming the file and what it is (never its content)."""
    shown = display_path(path)
    try:
        _check_kind(os.stat(path), shown, what, limit)  # before open(): opening a device can act
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise HpclaunchError(f"{shown}: no such {what} \u2014 check the path") from None
    except PermissionError:
        raise HpclaunchError(f"{shown}: cannot read the {what}: permission denied \u2014 check its permissions") from None
    except OSError as e:
        raise HpclaunchError(f"{shown}: cannot read the {what}: {e.strerror or e} \u2014 check the path") from None
    try:
        _check_kind(os.fstat(fd), shown, what, limit)  # the file opened is the file checked
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise HpclaunchError(f"{shown}: cannot read the {what}: {e.strerror or e} \u2014 check the file") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while being read
        _too_big(shown, what, len(data), limit)
    return data


def _check_kind(st: os.stat_result, shown: str, what: str, limit: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise HpclaunchError(f"{shown}: is a directory, not a {what} \u2014 name a YAML file")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise HpclaunchError(f"{shown}: is {kind}, not a regular file \u2014 name a YAML file")
    if st.st_size > limit:
        _too_big(shown, what, st.st_size, limit)


def _too_big(shown: str, what: str, size: int, limit: int) -> None:
    raise HpclaunchError(f"{shown}: is {size} bytes or more; a {what} may be at most {_size(limit)} \u2014 "
                         "is it the right file?")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def decode_input(data: bytes, shown: str) -> str:
    """UTF-8 text, or one line naming the first byte that is not (never replaced silently)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise HpclaunchError(f"{shown}:{line}:{column}: not UTF-8 text: byte {e.start} (0x{data[e.start]:02x}) "
                             f"{e.reason} \u2014 save the file as UTF-8") from None


def load_yaml_file(path: str, what: str = "file") -> Any:
    """Parse a YAML file; any problem is one HpclaunchError line naming the file and place."""
    return load_yaml_bytes(read_input_file(path, what), display_path(path))


# Entries of parsed files kept in the user cache: every edit of a job file makes a new one, so
# the oldest go beyond this many.
CACHED_DOCUMENTS = 64
_CACHE_PREFIX = "yaml-"
PARSE_VERSION = 1  # bump when yamlparse reads a text into other values: older entries are then not read


def load_yaml_bytes(data: bytes, label: str) -> Any:
    """The document of a file's bytes: parsed (yamlparse), or as parsed before from the same bytes."""
    text = decode_input(data, label)
    name, material = cache_entry(text)
    cached = _cached_document(name, material)
    if cached is not _NOT_CACHED:
        return cached
    document = load_yaml_text(text, label)
    if _plain(document, 0):  # JSON gives back exactly these values; not every document is (dates)
        import json
        if usercache.store(name, material, json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")):
            usercache.prune(_CACHE_PREFIX, CACHED_DOCUMENTS)
    return document


_NOT_CACHED = object()


def cache_entry(text: str) -> tuple[str, str]:
    """(name, material) of the user-cache entry of a file's text."""
    return _CACHE_PREFIX + usercache.key(PARSE_VERSION, texts=[text]), f"yaml-document\0{PARSE_VERSION}\0{text}"


def _cached_document(name: str, material: str) -> Any:
    """The document stored for exactly this text, else _NOT_CACHED (none, or not a plain document:
    the entry is damaged or not ours to trust, and the text is parsed again)."""
    raw = usercache.load(name, material)
    if raw is None:
        return _NOT_CACHED
    import json
    try:
        document = json.loads(raw.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return _NOT_CACHED
    return document if _plain(document, 0) else _NOT_CACHED


def _plain(value: Any, depth: int) -> bool:
    """Only what JSON writes and reads back as the same values: mappings with text keys, lists, text,
    numbers, booleans, null; nested no deeper than the parser allows."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if depth > 60:
        return False
    if type(value) is list:
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def load_yaml_text(text: str, label: str) -> Any:
    if len(text) > MAX_FILE_BYTES:  # text not from a file (an override): the same bound
        raise HpclaunchError(f"{label}: is {len(text)} characters; at most {_size(MAX_FILE_BYTES)} \u2014 shorten it")
    from hpclaunch.spec import yamlparse  # PyYAML: only for a text not parsed before
    return yamlparse.parse(text, label)


def dump_yaml(data: Any) -> str:
    """Block-style YAML of ``data``: by the plain writer when it holds only plain values, else PyYAML."""
    out: list[str] = []
    if _plain_block(data, 0, out):
        return "".join(out)
    from hpclaunch.spec import yamlparse  # PyYAML: a document with values the plain writer leaves to it
    return yamlparse.dump(data)


# Text written unquoted: a letter, `_` or `/` first, then only these characters: PyYAML reads such
# a word back as text unless it is one of YAML 1.1's booleans or nulls (compared lowercased).
_PLAIN_TEXT = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*")
_NOT_TEXT = {"yes", "no", "on", "off", "true", "false", "y", "n", "null", "~"}


def _plain_block(value: Any, indent: int, out: list) -> bool:
    """Append ``value`` (a mapping or list) in block style; False when it holds a value that is not
    plain (the caller then lets PyYAML write the whole document)."""
    pad = " " * indent
    if isinstance(value, dict):
        items = list(value.items())
        if not items:
            return _plain_inline({}, out)
        for key, item in items:
            if not isinstance(key, str):
                return False
            out.append(f"{pad}{_scalar(key)}:")
            if not _plain_item(item, indent, out):
                return False
        return True
    if isinstance(value, list):
        if not value:
            return _plain_inline([], out)
        for item in value:
            out.append(f"{pad}-")
            if not _plain_item(item, indent + 2, out, in_list=True):
                return False
        return True
    return False


def _plain_item(item: Any, indent: int, out: list, in_list: bool = False) -> bool:
    if isinstance(item, (dict, list)) and item:
        out.append("\n")
        return _plain_block(item, indent if in_list or isinstance(item, list) else indent + 2, out)
    out.append(" ")
    return _plain_inline(item, out)


def _plain_inline(value: Any, out: list) -> bool:
    if isinstance(value, (dict, list)):  # empty
        out.append("{}\n" if isinstance(value, dict) else "[]\n")
        return True
    text = _scalar(value)
    if text is None:
        return False
    out.append(text + "\n")
    return True


def _scalar(value: Any) -> str | None:
    """A scalar as PyYAML reads it back into the same value; None for a type it cannot write."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        if value != value:
            return ".nan"
        if value in (float("inf"), float("-inf")):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)  # as PyYAML's representer: YAML 1.1 floats need a dot before the exponent
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text
    if type(value) is not str:
        return None
    if _PLAIN_TEXT.fullmatch(value) and value.lower() not in _NOT_TEXT:
        return value
    return '"' + "".join(_escape(c) for c in value) + '"'


def _escape(c: str) -> str:
    """A character inside double quotes: printable ASCII as it is, the rest as YAML escapes."""
    if c == '"' or c == "\\":
        return "\\" + c
    n = ord(c)
    if 0x20 <= n < 0x7F:
        return c
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def display_path(path: str) -> str:
    """Paths in messages: relative to the working directory when that is shorter."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if len(rel) < len(path) and not rel.startswith("..") else path
