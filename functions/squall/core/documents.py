"""Every file Squall reads, read one way: job specs, kubectl snapshots, groups files, scenarios, cdk.json.

A document is JSON when its text parses as JSON: the json module reads it (fast, and
JSON's `1e3` stays the number YAML 1.1 would make a string). Anything else is read as
YAML with PyYAML's C loader (its pure-Python loader only where libyaml is missing).
What comes back is plain data — dicts, lists, strings, integers, finite floats, booleans,
None (and, from YAML timestamps, datetimes and dates) — and it is bounded:

- at most `max_bytes` of UTF-8 text (MAX_BYTES unless the caller asks for less);
- nested at most MAX_DEPTH levels deep, so that nothing reading it can recurse out of stack;
- YAML aliases add at most MAX_ALIAS_EXPANSION values to it (no "billion laughs");
- no key twice in one object, no NaN or infinity, no integer Python refuses to read.

Every problem is a DocumentError naming the file and, where the parser knows it, the
line and column: a reader is told what to fix, never shown a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from squall.planner.inputs import InputError, Team, read_teams  # noqa: F401  (re-exported: the readers use them)
from squall.planner.text import SHOWN_LENGTH, kind, shown  # noqa: F401  (re-exported: the readers use them)

# A kubectl snapshot of 10,000 pods is about 50 MB; a cluster ten times that size still fits.
MAX_BYTES = 512 * 2**20
MAX_DEPTH = 100
MAX_ALIAS_EXPANSION = 1_000_000

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_CONTAINERS = (dict, list)


class DocumentError(ValueError):
    """A file Squall cannot read as a document: `source`, then where (if known) and what."""

    def __init__(
        self, source: str, message: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = f"line {line}, column {column}: " if column is not None else f"line {line}: "
        super().__init__(f"{source}: {where}{message}")


def load(path: str | Path, *, max_bytes: int = MAX_BYTES) -> Any:
    """The document in a file (`-`: standard input); DocumentError says what is wrong with it."""
    return parse(read_bytes(path, max_bytes=max_bytes), source=_source(path), max_bytes=max_bytes)


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES) -> str:
    """A text file (a CSV trace, say) as a string: bounded, and UTF-8 or a DocumentError."""
    return decode(read_bytes(path, max_bytes=max_bytes), source=_source(path))


def read_bytes(path: str | Path, *, max_bytes: int = MAX_BYTES) -> bytes:
    source = _source(path)
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(max_bytes + 1)
        else:
            with Path(path).open("rb") as file:
                data = file.read(max_bytes + 1)
    except OSError as exc:
        raise DocumentError(source, f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise DocumentError(source, f"larger than {_size(max_bytes)}, the most Squall reads from one file")
    return data


def decode(data: bytes, *, source: str) -> str:
    """UTF-8 (a leading byte order mark is dropped); anything else is a DocumentError saying where."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise DocumentError(
            source,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded{hint}",
            line=line,
            column=column,
        ) from None


def parse(data: bytes | str, *, source: str = "<input>", max_bytes: int = MAX_BYTES) -> Any:
    """A JSON or YAML document from bytes or text; see the module's docstring for what it guarantees."""
    if len(data) > max_bytes:
        raise DocumentError(
            source, f"larger than {_size(max_bytes)}, the most Squall reads from one document"
        )
    text = decode(data, source=source) if isinstance(data, bytes) else data.removeprefix("\ufeff")
    with _without_cycle_collection():
        try:
            return _parse_json(text, source)
        except json.JSONDecodeError as exc:
            if source.lower().endswith(".json") and text.lstrip()[:1] in ("{", "["):
                raise DocumentError(
                    source, f"not valid JSON: {exc.msg}", line=exc.lineno, column=exc.colno
                ) from None
        return _parse_yaml(text, source)


def parse_json(text: str, *, source: str) -> Any:
    """JSON only (an environment variable, say): the same guarantees, no YAML fallback."""
    try:
        return _parse_json(text, source)
    except json.JSONDecodeError as exc:
        raise DocumentError(source, f"not valid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """A parsed document holds no reference cycles (recursive YAML aliases are refused), yet
    building its millions of objects would set Python's cycle collector traversing them
    again and again: a third of the time a large kubectl snapshot takes to read."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---- JSON ------------------------------------------------------------------------------------


class _Refused(Exception):
    """Raised from inside json's parser hooks; the caller turns it into a DocumentError."""

    def __init__(self, message: str, token: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.token = token


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"key {shown(key)} appears twice in one object")
            seen.add(key)
    return value


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise _Refused(f"number {shown(token)} is out of range", token)
    return value


def _constant(token: str) -> Any:
    raise _Refused(f"{token} is not a number Squall accepts", token)


_JSON = json.JSONDecoder(object_pairs_hook=_object, parse_float=_finite, parse_constant=_constant)


def _parse_json(text: str, source: str) -> Any:
    try:
        value = _JSON.decode(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise DocumentError(source, f"nested more than {MAX_DEPTH} levels deep") from None
    except _Refused as exc:
        line, column = _locate(text, exc.token)
        raise DocumentError(source, exc.message, line=line, column=column) from None
    except ValueError as exc:  # Python's limit on the digits of an integer
        match = re.search(r"\d{" + str(sys.get_int_max_str_digits() + 1) + ",}", text)
        line, column = _position(text, match.start()) if match else (None, None)
        raise DocumentError(
            source, f"an integer of more than {sys.get_int_max_str_digits()} digits", line=line, column=column
        ) from exc
    _check_depth(value, source)
    if _SURROGATE_ESCAPE.search(text):
        _check_strings(value, source)
    return value


def _check_depth(value: Any, source: str) -> None:
    """Breadth first, one level at a time: no recursion, and no per-value bookkeeping."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise DocumentError(source, f"nested more than {MAX_DEPTH} levels deep")
        below: list[Any] = []
        for container in level:
            children = container.values() if type(container) is dict else container
            below += [c for c in children if type(c) is dict or type(c) is list]
        level = below


def _check_strings(value: Any, source: str) -> None:
    """A `\\ud800` escape with no partner decodes to a string no file or terminal can hold."""
    stack = [value]
    while stack:
        item = stack.pop()
        texts: list[Any] = []
        if isinstance(item, dict):
            texts.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            texts.append(item)
        for text in texts:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise DocumentError(
                        source,
                        f"a string holds a lone surrogate \\u{ord(text[exc.start]):04x}, which is not text",
                    ) from None


def _locate(text: str, token: str | None) -> tuple[int | None, int | None]:
    """Where a number's text first stands outside a string (near enough: a string may hold it too)."""
    if not token:
        return None, None
    match = re.search(r"(?<![\w.\"+-])" + re.escape(token) + r"(?![\w.\"])", text)
    return _position(text, match.start()) if match else (None, None)


def _position(text: str, index: int) -> tuple[int, int]:
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


# ---- YAML ------------------------------------------------------------------------------------


@functools.cache
def _yaml_loader() -> type[Any]:
    """PyYAML's safe loader (libyaml's where present), refusing what a Squall document has no use for.

    Built on first use: a command that reads only JSON never imports PyYAML.
    """
    import yaml
    from yaml.constructor import ConstructorError, SafeConstructor

    base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[tuple[str, str]] = set()
                for key_node, _ in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                        key = (key_node.tag, key_node.value)
                        if key in seen:
                            raise ConstructorError(
                                None,
                                None,
                                f"key {shown(key_node.value)} appears twice in one mapping",
                                key_node.start_mark,
                            )
                        seen.add(key)
            return super().construct_mapping(node, deep=deep)

    def guarded(construct: Callable[[Any, Any], Any], what: str) -> Callable[[Any, Any], Any]:
        def constructor(loader: Any, node: Any) -> Any:
            try:
                value = construct(loader, node)
            except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
                digits = sys.get_int_max_str_digits()
                problem = (
                    f"an integer of more than {digits} digits"
                    if "digits" in str(exc)
                    else f"{shown(node.value)} is not {what}"
                )
                raise ConstructorError(None, None, problem, node.start_mark) from None
            if isinstance(value, float) and not math.isfinite(value):
                raise ConstructorError(
                    None, None, f"{shown(node.value)} is not a finite number", node.start_mark
                )
            return value

        return constructor

    def refuse(loader: Any, node: Any) -> Any:
        tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
        raise ConstructorError(
            None, None, f"the YAML tag {tag} is not accepted: Squall reads plain data only", node.start_mark
        )

    for tag, construct, what in (
        ("int", SafeConstructor.construct_yaml_int, "an integer"),
        ("float", SafeConstructor.construct_yaml_float, "a number"),
        ("bool", SafeConstructor.construct_yaml_bool, "true or false"),
        ("timestamp", SafeConstructor.construct_yaml_timestamp, "a timestamp"),
    ):
        Loader.add_constructor(f"tag:yaml.org,2002:{tag}", guarded(construct, what))
    for tag in ("binary", "set", "omap", "pairs"):
        Loader.add_constructor(f"tag:yaml.org,2002:{tag}", refuse)
    Loader.add_constructor(None, refuse)
    return Loader


def _parse_yaml(text: str, source: str) -> Any:
    import yaml

    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        if "maximum nesting depth" in problem:  # libyaml's own bound, far above ours
            problem = f"nested more than {MAX_DEPTH} levels deep"
        elif not isinstance(exc, yaml.constructor.ConstructorError):
            problem = f"not valid YAML or JSON: {problem}"
        raise DocumentError(
            source,
            problem,
            line=mark.line + 1 if mark is not None else None,
            column=mark.column + 1 if mark is not None else None,
        ) from None
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position) if isinstance(exc.position, int) else (None, None)
        raise DocumentError(
            source, f"not valid YAML or JSON: {exc.reason}", line=line, column=column
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(source, f"not valid YAML or JSON: {exc}") from None
    except RecursionError:
        raise DocumentError(source, f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def _check_nodes(root: Any, source: str) -> None:
    """Depth and size with aliases expanded, each node visited once (aliases share nodes)."""
    depth: dict[int, int] = {}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    unique = 0
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        children = _children(node)
        if leaving:
            on_path.discard(key)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if depth[key] > MAX_DEPTH:
                raise DocumentError(source, f"nested more than {MAX_DEPTH} levels deep", **_mark(node))
            continue
        if key in depth:
            continue
        unique += 1
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise DocumentError(source, "an alias refers to a node that contains it", **_mark(child))
            if id(child) not in depth:
                stack.append((child, False))
    if size[id(root)] > unique + MAX_ALIAS_EXPANSION:
        raise DocumentError(
            source,
            f"its aliases expand it to {size[id(root)]:,} values; at most {MAX_ALIAS_EXPANSION:,} more "
            "than it writes out are accepted",
        )


def _children(node: Any) -> list[Any]:
    value = node.value
    if isinstance(value, list):  # a mapping's value is its (key, value) pairs, a sequence's its items
        return [part for item in value for part in (item if isinstance(item, tuple) else (item,))]
    return []


def _mark(node: Any) -> dict[str, int]:
    mark = getattr(node, "start_mark", None)
    return {"line": mark.line + 1, "column": mark.column + 1} if mark is not None else {}


# ---- pieces of configuration more than one reader takes: one schema each, in planner/inputs.py ----

ConfigError = InputError  # a piece of configuration that cannot be used; `errors`: 'field: problem' each

# ---- helpers ---------------------------------------------------------------------------------


def _source(path: str | Path) -> str:
    return "<stdin>" if str(path) == "-" else str(path)


def _size(count: int) -> str:
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count:,} bytes"
