"""What the simulated cluster hands out: copies of its objects, or read-only shared ones.

Models: the API server's answers (objects the caller owns), client-go's informer
listers (`lists="shared"`: an unchanged object is the same dict again until its
resourceVersion changes), and a checking mode that catches a caller, or the cluster,
changing a shared object without a new resourceVersion. Also the JSON copies the
cluster makes of what callers give it, and the JSON merge patch.

Leaves out: watches, field and label selectors beyond the Cluster port's arguments,
server-side apply and strategic merge keys (a patch merges maps and replaces lists).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.local.cluster.state import Stored
from squall.ports import KubeObject

LIST_MODES = frozenset({"copies", "shared", "checked"})


class SharedObjectChanged(AssertionError):
    """A shared list object differs from the cluster's own at the same resourceVersion."""

    def __init__(self, metadata: Mapping[str, Any], shared: KubeObject, fresh: KubeObject) -> None:
        changed = sorted(key for key in {*shared, *fresh} if shared.get(key) != fresh.get(key))
        super().__init__(
            f"{metadata.get('namespace') or ''}/{metadata.get('name')} at resourceVersion "
            f"{metadata.get('resourceVersion')}: {', '.join(changed)} changed without a new resourceVersion "
            "(or a caller changed a shared list object)"
        )


class ListViews:
    """Hands out objects as `lists` says (see SimulatedCluster)."""

    def __init__(self, mode: str, version: Callable[[], int]) -> None:
        if mode not in LIST_MODES:
            raise ValueError(f"lists must be one of {', '.join(sorted(LIST_MODES))}, not {mode!r}")
        self.mode = mode
        self._version = version
        self._whole_lists: dict[str, tuple[object, list[KubeObject]]] = {}

    def view(self, holder: Stored, copy: Callable[[KubeObject], KubeObject]) -> KubeObject:
        """What a list hands out for one object."""
        if self.mode == "copies":
            return copy(holder.obj)
        view = holder.view
        if (
            view is not None
            and view["metadata"].get("resourceVersion") == holder.obj["metadata"]["resourceVersion"]
        ):
            if self.mode == "checked" and view != (fresh := copy(holder.obj)):
                raise SharedObjectChanged(holder.obj["metadata"], view, fresh)
            return view
        holder.view = copy(holder.obj)
        return holder.view

    def views(self, holders: Iterable[Stored], copy: Callable[[KubeObject], KubeObject]) -> list[KubeObject]:
        """What a list hands out for each object; with shared lists, at a glance for those unchanged."""
        if self.mode != "shared":
            return [self.view(holder, copy) for holder in holders]
        view = self.view
        # A change drops the object's view (ClusterState.touch): one still there is current.
        return [holder.view or view(holder, copy) for holder in holders]

    def whole_list(
        self, kind: str, build: Callable[[], list[KubeObject]], version: Callable[[], object] | None = None
    ) -> list[KubeObject]:
        """Every job, pod or node; with shared lists, the last answer again while nothing changed.

        Every change gives the cluster a new resourceVersion (a deletion too, as in
        etcd), so an answer given at the current one is still the answer. `version`:
        one that moves on with every change to this kind only (ClusterState.kind_version).
        """
        if self.mode == "copies":
            return build()
        version_now = (version or self._version)()
        cached = self._whole_lists.get(kind)
        if cached is not None and cached[0] == version_now:
            if self.mode == "checked":
                fresh = build()
                if len(fresh) != len(cached[1]) or any(
                    a is not b for a, b in zip(fresh, cached[1], strict=False)
                ):
                    raise SharedObjectChanged(
                        {"name": f"list of {kind}", "resourceVersion": str(version_now)},
                        {"items": cached[1]},
                        {"items": fresh},
                    )
            return list(cached[1])
        views = build()
        self._whole_lists[kind] = (version_now, views)
        return list(views)


def merge(target: dict[str, Any], changes: Mapping[str, Any]) -> None:
    """JSON merge patch: null deletes, objects merge, anything else replaces."""
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = thaw(value)


_NESTED = (dict, list)


def json_copy(value: Any) -> Any:
    """A deep copy of the cluster's own JSON data (dicts, lists, scalars only).

    Several times faster than copy.deepcopy: lists are copied on every list call.
    """
    if type(value) is dict:
        copied = value.copy()
        for key, item in copied.items():
            if type(item) in _NESTED:
                copied[key] = json_copy(item)
        return copied
    if type(value) is list:
        return [json_copy(v) if type(v) in _NESTED else v for v in value]
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def thaw_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A caller's manifest as the cluster's own plain data; JSON's C codec does it fastest."""
    try:
        copied = json.loads(json.dumps(manifest))
    except (TypeError, ValueError):  # not JSON as it is (a Mapping that is not a dict, say)
        copied = thaw(manifest)
    return copied if isinstance(copied, dict) else {}


def thaw(value: Any) -> Any:
    """A deep copy of a caller's JSON-like data as plain dicts and lists."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {k: v if type(v) in _SCALARS else thaw(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


def object_view(obj: KubeObject) -> KubeObject:
    """A copy of a pod or Job that a caller may change without changing the cluster.

    Metadata and status are copied whole, by their known shape (flat maps, lists of
    flat maps, and the container states and last states one level deeper), which is about twice as
    fast as a generic deep copy; lists copy every pod on every reconcile. The spec
    is copied one level deep: its nested parts (containers, affinity) never change
    after creation and are shared read-only, since copying them for every pod on
    every list would dominate a 10,000-job replay.
    """
    status = _copy_two_levels(obj.get("status") or {})
    for key in ("containerStatuses", "initContainerStatuses"):
        entries = status.get(key)
        if entries:
            status[key] = [_container_status_copy(entry) for entry in entries]
    return {
        **obj,
        "metadata": _copy_two_levels(obj["metadata"]),
        "spec": dict(obj.get("spec") or {}),
        "status": status,
    }


def _container_status_copy(entry: dict[str, Any]) -> dict[str, Any]:
    copied = {**entry, "state": {k: dict(v) for k, v in (entry.get("state") or {}).items()}}
    if "lastState" in entry:
        copied["lastState"] = {k: dict(v) for k, v in (entry.get("lastState") or {}).items()}
    return copied


def _copy_two_levels(value: dict[str, Any]) -> dict[str, Any]:
    """Copy a map, its maps and lists, and the maps in those lists; deeper values are shared."""
    copied = value.copy()
    for key, item in copied.items():
        kind = type(item)
        if kind is dict:
            copied[key] = json_copy(item)
        elif kind is list:
            copied[key] = [entry.copy() if type(entry) is dict else entry for entry in item]
    return copied
