"""PyYAML's side of reading hpclaunch's YAML: the strict, bounded loader (yamlio.py reads the files).

Imported by yamlio only when a text must really be parsed (PyYAML costs ~15 ms to import; a file
read before comes from the user cache) or a document has values the plain writer does not write.

Job files and profiles are read by people who did not write them (a shared profile folder, a job
file from a colleague, a path typed into `-o profile=`), so reading is bounded before any work is
done on the content: only regular files, at most MAX_FILE_BYTES, UTF-8, nested at most MAX_DEPTH
deep, and at most MAX_NODES values and MAX_TEXT characters *after* alias expansion (an alias is
counted as the whole subtree it stands for, while the document is composed, before anything is
constructed; a 500-byte "billion laughs" is refused after a few hundred events). Nothing later in
hpclaunch (merge, load, validate, render) then sees more than a bounded tree.

The limits: a real job file is well under 10 KiB and 1,000 values, a large site profile under
20 KiB. 1 MiB of text and 20,000 values leave one to two orders of magnitude above that (a
command of 10,000 file arguments still fits; sweeps of more values are written as ranges), and
keep the worst case under a second and 200 MB: composing in Python costs ~7 us a value, and every
later stage is at most linear in the tree (sweeps are bounded by their own rules). Alias expansion
is bounded by the same counts, not by a count of alias uses: what costs is the expanded size, and
a legitimate anchor used many times is cheap. Depth 50 is five times the deepest real file (a
sweep spec: 5 levels), and far below Python's recursion limit for the recursive stages after
this one.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.resolver import Resolver

from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem

MAX_NODES = 20_000            # values (scalars, lists, mappings) after alias expansion
MAX_TEXT = 2 << 20            # characters of scalar text after alias expansion (twice yamlio.MAX_FILE_BYTES)
MAX_DEPTH = 50                # lists and mappings inside each other
MAX_DIGITS = 100              # an integer's digits (no setting holds more than 19; str(int) stays cheap)

try:  # the C parser gives the events; composing (where the bounds are counted) is ours, in Python
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: Any) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class _Refused(Exception):
    """A bound or rule broken while reading: where (a mark, or a node to name by its field path) and why."""

    def __init__(self, mark: Any, message: str, fix: str, node: Any = None, root: Any = None):
        super().__init__(message)
        self.mark, self.message, self.fix, self.node, self.root = mark, message, fix, node, root


class _BoundedComposer(Composer):
    """PyYAML's composer, counting each alias as the subtree it stands for, and the depth."""

    def compose_document(self) -> Any:
        self._nodes = self._text = self._depth = 0
        self._aliases = False
        self._weight: dict[int, tuple[int, int]] = {}
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                weight = self._weight.get(id(node))
                if weight is None:  # `&a [*a]`: the alias is inside its own anchor
                    raise _Refused(event.start_mark, f"alias *{event.anchor} refers to a value that contains it",
                                   "a job file or profile cannot be recursive: write the value out")
                self._aliases = True
                self._add(weight[0], weight[1], event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        nodes, text = self._nodes, self._text
        if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(event.start_mark, f"lists and mappings are nested more than {MAX_DEPTH} deep",
                               "flatten it (no setting is deeper than a few levels)")
        node = super().compose_node(parent, index)
        if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            self._depth -= 1
        self._add(1, len(node.value) if isinstance(event, ScalarEvent) else 0, event.start_mark)
        self._weight[id(node)] = (self._nodes - nodes, self._text - text)
        return node

    def _add(self, nodes: int, text: int, mark: Any) -> None:
        self._nodes += nodes
        self._text += text
        if self._nodes > MAX_NODES or self._text > MAX_TEXT:
            what = (f"more than {MAX_NODES} values" if self._nodes > MAX_NODES
                    else f"more than {MAX_TEXT // (1 << 20)} MiB of text")
            if self._aliases:
                raise _Refused(mark, f"aliases (*name) expand the document to {what}",
                               "write the values out, or use fewer aliases (is it an alias bomb?)")
            raise _Refused(mark, f"the document holds {what}", "split it or shorten it")


class _StrictLoader(_Parser, _BoundedComposer, SafeConstructor, Resolver):  # type: ignore[misc, valid-type]
    def __init__(self, stream: Any) -> None:
        _Parser.__init__(self, stream)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    # The composer is ours (bounded), not the C parser's own.
    get_single_node = Composer.get_single_node
    get_node = Composer.get_node
    check_node = Composer.check_node

    def construct_document(self, node: Any) -> Any:
        self.root_node = node  # to name the field path of a bad key
        return super().construct_document(node)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError, LookupError) as e:
            # An explicit tag on a value it does not fit (`!!timestamp 2001-01-01x`, `!!float abc`):
            # PyYAML's constructors raise whatever their parsing raised.
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise _Refused(node.start_mark, f"is not a valid {tag} value ({type(e).__name__})",
                           "remove the tag, or quote the value", node, getattr(self, "root_node", None)) from None

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(c.isdigit() for c in node.value)
        if digits > MAX_DIGITS:
            raise _Refused(node.start_mark, f"is a number of {digits} digits",
                           "no setting takes more than 19 digits (quote it if it is text)",
                           node, getattr(self, "root_node", None))
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


class _KeyNotString(Exception):
    """A mapping key that is a list or a mapping: no Python dict can hold it."""

    def __init__(self, loader: Any, mapping: Any, key_node: Any):
        super().__init__()
        self.root, self.mapping, self.key_node = getattr(loader, "root_node", None), mapping, key_node


def _mapping(loader: Any, node: Any, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):  # `[1]: 2`, `{a: 1}: 2`, `? [a]`
            raise _KeyNotString(loader, node, key_node)
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse(text: str, label: str) -> Any:
    """The document in ``text``; any problem is one line naming ``label`` and the place."""
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as e:
        mark = e.mark
        where = _path_to(e.root, e.node) if e.node is not None and e.root is not None else None
        raise InvalidInput([Problem(f"{label}:{mark.line + 1}:{mark.column + 1}", where or "", e.message,
                                    has_value=False, fix=e.fix)]) from None
    except _KeyNotString as e:
        mark = e.key_node.start_mark
        where = _path_to(e.root, e.mapping) if e.root is not None else None
        kind = "list" if isinstance(e.key_node, yaml.SequenceNode) else "mapping"
        key = _node_text(e.key_node)
        key = key if len(key) <= 60 else key[:57] + "..."
        raise InvalidInput([Problem(
            f"{label}:{mark.line + 1}:{mark.column + 1}", where or "",
            f"keys must be strings, got a {kind} ({key})", has_value=False,
            fix=f"quote the key, e.g. '{key}': ..., or remove it")]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if "nesting depth" in problem:  # PyYAML >= 6.0.3's own parser limit, met before MAX_DEPTH's check
            raise HpclaunchError(f"{where}: lists and mappings are nested more than {MAX_DEPTH} deep \u2014 "
                                 "flatten it (no setting is deeper than a few levels)") from None
        raise HpclaunchError(f"{where}: YAML syntax error: {_escaped(problem)} \u2014 fix the YAML at that line") from None
    finally:
        loader.dispose()


def _escaped(text: str) -> str:
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _path_to(node: Any, target: Any, path: str = "") -> str | None:
    """The dotted field path of `target` within the document `node` ("" for the top level)."""
    if node is target:
        return path
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            name = _node_text(k)
            found = _path_to(v, target, f"{path}.{name}" if path else name)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found = _path_to(v, target, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _node_text(node: Any) -> str:
    """A node as short flow-style YAML, for messages."""
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_node_text(n) for n in node.value) + "]"
    if isinstance(node, yaml.MappingNode):
        return "{" + ", ".join(f"{_node_text(k)}: {_node_text(v)}" for k, v in node.value) + "}"
    return str(node.value)


def dump(data: Any) -> str:
    Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False)
