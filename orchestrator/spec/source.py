"""YAML with positions: one document parsed into plain data plus a `SourceMap` of where each
key and value sits (file, 1-based line and column), so that every problem is located.

Contract: `read_yaml(text, filename)` raises SpecError (never anything else) for syntax
errors, duplicate keys, keys that are not strings, more than one document, recursive or
explosive aliases, nesting too deep to parse, and text over MAX_SPEC_BYTES.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from orchestrator.errors import Problem, SpecError

# Spec files are small; this bounds what anchors and aliases may expand to.
MAX_EXPANDED_NODES = 20_000
MAX_SPEC_BYTES = 1_000_000


class SourceMap:
    """Where each value of a YAML document sits: path tuple -> (line, column), 1-based.

    `plain` keeps the text of unquoted scalars that YAML read as something other than a
    string (`off`, `2.30`, `5`), for messages that say how the value was read. `borrowed`
    maps a path whose value came from another file (the `infra:` outputs) to that file's map
    and the path there; `where` and `raw` follow it.
    """

    def __init__(self, file: str):
        self.file = file
        self.values: dict[tuple, tuple[int, int]] = {}
        self.keys: dict[tuple, tuple[int, int]] = {}
        self.plain: dict[tuple, str] = {}
        self.borrowed: dict[tuple, tuple[SourceMap, tuple]] = {}

    def _owner(self, path: tuple) -> tuple[SourceMap, tuple]:
        path = tuple(str(p) for p in path)
        for i in range(len(path), 0, -1):
            if path[:i] in self.borrowed:
                other, at = self.borrowed[path[:i]]
                return other, at + path[i:]
        return self, path

    def where(self, path: tuple, prefer_key: bool = False) -> tuple[str, int, int]:
        """(file, line, column) of `path`, in the file its value came from."""
        owner, at = self._owner(path)
        return (owner.file, *owner.find(at, prefer_key))

    def raw(self, path: tuple) -> str | None:
        """The source text of an unquoted non-string scalar at `path`, if that is what it was."""
        owner, at = self._owner(path)
        return owner.plain.get(at)

    def find(self, path: tuple, prefer_key: bool = False) -> tuple[int, int]:
        path = tuple(str(p) for p in path)
        while True:
            if prefer_key and path in self.keys:
                return self.keys[path]
            if path in self.values:
                return self.values[path]
            if not path:
                return (1, 1)
            path = path[:-1]


def split_path(text: str) -> tuple:
    """"training.optimizer.lr" -> ("training", "optimizer", "lr")."""
    return tuple(p for p in text.split(".") if p)


def dotted(path: tuple) -> str:
    """The reverse of `split_path`."""
    return ".".join(str(p) for p in path)


def read_yaml(text: str, filename: str) -> tuple[Any, SourceMap]:
    """Parse one YAML document into plain data plus its source map.

    Raises SpecError (never anything else) for syntax errors, duplicate keys, more than one
    document, recursive or explosive aliases, and nesting too deep to parse.
    """
    smap = SourceMap(filename)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([Problem(filename, 0, 0, "", f"file is larger than {MAX_SPEC_BYTES} bytes")])
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise SpecError([Problem(filename, 1, 1, "", "the file is empty; expected a mapping of fields")])
            _walk(node, (), smap, filename, set(), [0, set()])
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except SpecError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        if "'\\t'" in str(exc.problem):
            # PyYAML refuses tabs in indentation (and after a key's colon) with a scanner error.
            lines = text.splitlines()
            row = lines[line - 1] if 0 < line <= len(lines) else ""
            leading = row[: col - 1].strip(" \t") == ""
            reason += "; indent with spaces, not tabs" if leading else "; use spaces, not tabs"
        raise SpecError([Problem(filename, line, col, "", f"YAML syntax: {reason}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise SpecError([Problem(filename, line, column, "", f"YAML: {exc.reason} (character {exc.character!r})")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(filename, 1, 1, "", f"YAML: {exc}")]) from None
    except RecursionError:
        raise SpecError([Problem(filename, 1, 1, "", "the document is nested too deeply")]) from None
    return data, smap


class _Loader(yaml.SafeLoader):
    """SafeLoader whose value errors (e.g. an impossible date) carry the node's position.

    PyYAML's own parser, not libyaml's: libyaml accepts documents PyYAML refuses (tabs where
    PyYAML's scanner does not take them, among others), and the messages are PyYAML's."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {exc}",
                                                    node.start_mark) from None


# YAML 1.1 (PyYAML) reads a float only with a dot: `lr: 1e-5` would be the text "1e-5", which
# the strict number fields refuse. YAML 1.2's core schema reads it as the number it looks like
# (https://yaml.org/spec/1.2.2/#1023-core-schema, tag:yaml.org,2002:float): so does this loader.
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _walk(node: yaml.Node, path: tuple, smap: SourceMap, filename: str, active: set, count: list) -> None:
    # Only the values aliases repeat count against MAX_EXPANDED_NODES: the file's own values are
    # bounded by MAX_SPEC_BYTES, and a sweep of 10,000 written-out variants (MAX_TRIALS) has
    # more than 20,000 of them and no alias at all. count = [repeats, ids of nodes met].
    if id(node) in count[1]:
        count[0] += 1
    else:
        count[1].add(id(node))
    if count[0] > MAX_EXPANDED_NODES:
        raise SpecError([Problem(filename, node.start_mark.line + 1, node.start_mark.column + 1, dotted(path),
                                 f"aliases repeat more than {MAX_EXPANDED_NODES} values; write the values out, "
                                 "or alias smaller parts")])
    if id(node) in active:
        raise SpecError([Problem(filename, node.start_mark.line + 1, node.start_mark.column + 1, dotted(path),
                                 "recursive alias: a value contains itself")])
    smap.values.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.ScalarNode) and node.style is None and node.tag != _STR_TAG:
        smap.plain.setdefault(path, node.value)
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            kmark = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError([Problem(filename, *kmark, dotted(path),
                                         f"a {key_node.id} cannot be a key; keys are field names")])
            if key_node.tag not in (_STR_TAG, _MERGE_TAG):
                # `null: x`, `1: x`, `yes: x`: pydantic would say "Keys should be strings" at the
                # mapping, or not at all once YAML had turned the key into None or True.
                shown = key_node.value or "(empty)"
                raise SpecError([Problem(filename, *kmark, dotted(path),
                                         f"key {shown} is not a string; quote it: \"{key_node.value}\":")])
            key = key_node.value
            if key in seen and key != "<<":
                raise SpecError([Problem(filename, *kmark, dotted(path + (key,)),
                                         f"duplicate key {key!r} (first on line {seen[key]})")])
            seen[key] = kmark[0]
            smap.keys.setdefault(path + (key,), kmark)
            _walk(value_node, path + (key,), smap, filename, active, count)
        active.discard(id(node))
    elif isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        for i, item in enumerate(node.value):
            _walk(item, path + (str(i),), smap, filename, active, count)
        active.discard(id(node))
