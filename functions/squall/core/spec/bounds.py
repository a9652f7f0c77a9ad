"""What a rejection reports, bounded: the issues at the user's field paths, and the
body-shape checks that bound the work of validating a hostile body before pydantic
sees it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from squall.core.spec.limits import (
    ISSUES_CONSIDERED,
    MAX_BODY_DEPTH,
    MAX_BODY_VALUES,
    MAX_ISSUE_FIELD_LENGTH,
    MAX_ISSUE_MESSAGE_LENGTH,
    MAX_ISSUES,
    MAX_ISSUES_JSON_BYTES,
)


class SpecError(ValueError):
    """A job spec or command that cannot be accepted; `issues` lists its problems.

    The list is bounded (see `bound_issues`): at most MAX_ISSUES, each clipped, and a
    last "and N more" issue when some were left out. `total` counts them all.
    """

    def __init__(self, issues: Sequence[Issue], *, more: int = 0) -> None:
        self.total = len(issues) + more
        self.issues = bound_issues(issues, more=more)
        super().__init__("; ".join(f"{i.field}: {i.message}" for i in self.issues))


@dataclass(frozen=True)
class Issue:
    """One validation problem: the field path as the user wrote it, and why."""

    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


def bound_issues(issues: Sequence[Issue], *, more: int = 0) -> list[Issue]:
    """The issues worth keeping: distinct, printable, clipped, and bounded in count and size.

    `more` counts issues found but not even listed (a huge body's)."""
    considered = issues[:ISSUES_CONSIDERED]
    distinct = list(
        dict.fromkeys(
            Issue(_clip(i.field, MAX_ISSUE_FIELD_LENGTH), _clip(i.message, MAX_ISSUE_MESSAGE_LENGTH))
            for i in considered
        )
    )
    left_out = len(issues) - len(considered) + more
    kept: list[Issue] = []
    size = 2
    for issue in distinct:
        cost = len(json.dumps(issue.to_dict())) + 2
        if len(kept) == MAX_ISSUES or size + cost > MAX_ISSUES_JSON_BYTES:
            break
        kept.append(issue)
        size += cost
    left_out += len(distinct) - len(kept)
    if left_out:
        kept.append(Issue(field="(body)", message=f"and {left_out} more issues"))
    return kept


def _clip(text: str, limit: int) -> str:
    """Printable text (control characters and lone surrogates escaped), at most `limit` characters."""
    text = text[: limit + 1]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Tags of the branches of a sweep parameter (model.SweepParameter), left out of field paths.
PARAMETER_KINDS = ("<list>", "<range>")


def _path(loc: Sequence[str | int]) -> str:
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
        else:
            path += f".{item}" if path else item
    return path or "(body)"


_AFTER_VALIDATION = re.compile(r" after validation")
_INSTANCE_OF = re.compile(r" or instance of \w+", re.ASCII)
# Whatever pydantic still says in its own words ("Input should be ...", "String should
# have ..."): said as the spec reference says it.
_PYDANTIC_SHOULD = re.compile(
    r"^(?:Input|String|List|Dictionary|Tuple|Set|Value|Object|Data) should ", re.ASCII
)

# What is allowed, by pydantic's error type: the spec's own words, from the error's context.
_KINDS = {
    "int_type": "must be a whole number such as 4",
    "int_parsing": "must be a whole number such as 4",
    "int_from_float": "must be a whole number such as 4",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "none_required": "must be null",
}


def _entries(count: object) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def _in_our_words(kind: str, ctx: Mapping[str, Any], message: str) -> str:
    """Pydantic's message for an error of `kind`, said as Squall says what is allowed."""
    if kind in _KINDS:
        return _KINDS[kind]
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected', '')}".rstrip()
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} characters"
    if kind == "too_long":
        return f"must have at most {_entries(ctx.get('max_length'))}, got {ctx.get('actual_length')}"
    if kind == "too_short":
        return f"must have at least {_entries(ctx.get('min_length'))}, got {ctx.get('actual_length')}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    return _PYDANTIC_SHOULD.sub("must ", message)


def validation_issues(exc: ValidationError) -> list[Issue]:
    """Issues at the user's field paths, in the user's words (no pydantic internals)."""
    issues = []
    errors = exc.errors(include_url=False, include_input=False, include_context=True)
    for error in errors[:ISSUES_CONSIDERED]:
        loc = error["loc"]
        message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message = _INSTANCE_OF.sub("", _AFTER_VALIDATION.sub("", message))
        if error["type"] == "extra_forbidden":
            message = "unknown field; check the spelling against the job spec reference"
        elif error["type"] == "missing":
            message = "is required"
        elif error["type"] not in ("value_error", "assertion_error"):
            message = _in_our_words(error["type"], error.get("ctx") or {}, message)
        # A sweep parameter is a list or a range (model.SweepParameter): the branch is no field.
        loc = tuple(item for item in loc if item not in PARAMETER_KINDS)
        if "[key]" in loc:
            message = f"not an allowed key: {message}"
            loc = tuple(item for item in loc if item != "[key]")
        issues.append(Issue(field=_path(loc), message=message))
    return issues


_NUL = "holds a NUL character (\\u0000), which a process argument or environment variable cannot hold"


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _key_text(key: object) -> str:
    text = key if isinstance(key, str) else repr(key)
    return text if len(text) <= 64 else text[:63] + "…"


def shape_issues(data: Any, *, refuse_nul: bool = True) -> tuple[list[Issue], bool]:
    """Problems pydantic would not name or would be slow to: text that is not Unicode, and size.

    With `refuse_nul`, text holding a NUL character too: every string of a spec ends up
    in a pod (an argument, a variable, a label) or a record, and exec(2) takes no NUL,
    so such a job could only fail when its container starts (a stored spec accepted
    before this check is left to load).
    Returns the issues and whether the body is too large or deep to validate at all.
    Walks without recursion and stops at MAX_BODY_VALUES.
    """
    issues: list[Issue] = []
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        node, path, depth = stack.pop()
        seen += 1
        if seen > MAX_BODY_VALUES:
            issues.append(
                Issue("(body)", f"has more than {MAX_BODY_VALUES} values; a job spec has far fewer")
            )
            return issues, True
        if isinstance(node, str):
            if _has_surrogate(node):
                issues.append(Issue(path or "(body)", "is not valid Unicode text (a lone surrogate)"))
            elif refuse_nul and "\x00" in node:
                issues.append(Issue(path or "(body)", _NUL))
            continue
        if isinstance(node, Mapping):
            entries: list[tuple[object, Any]] = list(node.items())
        elif isinstance(node, list | tuple):
            entries = list(enumerate(node))
        else:
            continue
        if depth >= MAX_BODY_DEPTH:
            issues.append(Issue(path or "(body)", f"is nested more than {MAX_BODY_DEPTH} levels deep"))
            return issues, True
        for key, value in reversed(entries):
            if isinstance(key, int) and not isinstance(node, Mapping):
                child = f"{path}[{key}]"
            else:
                child = f"{path}.{_key_text(key)}" if path else _key_text(key)
                if isinstance(key, str) and _has_surrogate(key):
                    issues.append(Issue(child, "the key is not valid Unicode text (a lone surrogate)"))
            stack.append((value, child, depth + 1))
    return issues, False
