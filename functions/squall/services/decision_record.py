"""A scale check's decision record, cut to fit one DynamoDB item."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def shrunk_to_fit(doc: Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """A copy of `doc` whose compact JSON is at most `max_bytes`: its longest lists cut, again and again.

    Each list cut is named under "truncated" (its path, and how long it was), so a
    reader of the record knows it holds the first part only.
    """
    # ASCII: as many bytes as characters. A check's record holds no cycles: none to look for.
    text = json.dumps(doc, separators=(",", ":"), check_circular=False)
    if len(text) <= max_bytes:
        return dict(doc)
    copy: dict[str, Any] = json.loads(text)
    cut: dict[str, int] = {}
    for _ in range(64):  # each pass halves a list: enough for any list a check makes
        if len(text) <= max_bytes:
            break
        found = _longest_list(copy, "")
        if found is None or len(found[1]) <= 1:
            break
        path, items = found
        cut.setdefault(path, len(items))
        del items[max(1, len(items) // 2) :]
        text = json.dumps(copy, separators=(",", ":"), check_circular=False)
    if cut:
        copy["truncated"] = cut
    return copy


def _longest_list(doc: Any, path: str) -> tuple[str, list[Any]] | None:
    best: tuple[str, list[Any]] | None = None
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    if isinstance(doc, list):
        best = (path, doc)
    for key, value in children:
        found = _longest_list(value, f"{path}.{key}" if path else str(key))
        if found is not None and (best is None or len(found[1]) > len(best[1])):
            best = found
    return best
