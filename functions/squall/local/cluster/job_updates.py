"""The API server's validation of a change to a Job (batch/v1, Kubernetes 1.30).

Models: a JSON merge patch applied to the stored Job; what the API server lets
change and what it refuses with 422 Invalid, naming the field:

- `spec.suspend` may change at any time;
- the pod template is immutable, except its scheduling directives (nodeSelector,
  tolerations, affinity.nodeAffinity, schedulingGates, and the template's labels
  and annotations), which may change while the stored Job is suspended and has
  no `status.startTime`: created suspended and never resumed, or suspended again
  after running (the Job controller clears startTime when it suspends a Job).
  KEP-2926; the check reads the Job as stored, so a patch may change the
  directives and resume the Job at once, as Kueue does when it admits a Job;
- the template's labels must still match the Job's selector;
- `spec.selector`, `spec.completions`, `spec.completionMode`, `spec.manualSelector`
  and `spec.podFailurePolicy` are immutable;
- the Job's own labels and annotations may change; its name, namespace and uid not;
- the status is a subresource: a patch of the Job leaves it as it is.

Leaves out: `spec.activeDeadlineSeconds` and the other fields the API lets change
but the simulator does not act on after creation (refused as not modelled),
resourceVersion preconditions, strategic-merge keys (the patch merges maps and
replaces lists, as a JSON merge patch does), and the 1.35 alpha that lets a
suspended Job's resource requests change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.core.errors import PermanentError
from squall.local.cluster.views import json_copy, merge
from squall.ports import KubeObject

# Immutable once created (the API server's ValidateJobSpecUpdate).
_IMMUTABLE_SPEC = ("selector", "completions", "completionMode", "manualSelector", "podFailurePolicy")
# The spec fields a patch may change in the simulator.
_MUTABLE_SPEC = ("suspend", "template")
_SCHEDULING_SPEC = ("nodeSelector", "tolerations", "schedulingGates")
_SCHEDULING_METADATA = ("labels", "annotations")
_FIXED_METADATA = ("name", "namespace", "uid", "creationTimestamp", "generateName")

SCHEDULING_RULE = (
    "a Job's scheduling directives (nodeSelector, tolerations, affinity.nodeAffinity, schedulingGates, "
    "template labels and annotations) may change only while it is suspended and has no status.startTime"
)


def invalid(name: str, field: str, detail: str) -> PermanentError:
    """A 422 Invalid answer, worded as the API server words it."""
    return PermanentError(f'Job.batch "{name}" is invalid: {field}: {detail}')


def patched_job(stored: KubeObject, patch: Mapping[str, Any], *, started: bool) -> KubeObject:
    """The Job as `patch` leaves it; PermanentError (422 Invalid) when the API server refuses it.

    `started`: the stored Job has a status.startTime.
    """
    name = str(stored["metadata"]["name"])
    if not isinstance(patch, Mapping):
        raise PermanentError(f'Job.batch "{name}": a patch must be a JSON object, not {type(patch).__name__}')
    updated = json_copy(stored)
    try:
        merge(updated, patch)
    except (TypeError, AttributeError) as exc:
        raise PermanentError(f'Job.batch "{name}": the patch cannot be applied: {exc}') from exc
    for key in ("apiVersion", "kind"):
        if updated.get(key) != stored.get(key):
            raise invalid(name, key, f"field is immutable: {stored.get(key)!r}")
    updated["status"] = stored.get("status")
    _check_metadata(name, stored, updated)
    spec, old_spec = updated.get("spec"), stored["spec"]
    if not isinstance(spec, dict):
        raise invalid(name, "spec", "Required value")
    if spec.get("suspend") is None:
        spec["suspend"] = False  # a null removes the field; the API server defaults it again
    if not isinstance(spec["suspend"], bool):
        raise invalid(name, "spec.suspend", f"Invalid value: {spec['suspend']!r}: must be a boolean")
    for key in sorted({*spec, *old_spec}):
        if spec.get(key) == old_spec.get(key) or key in _MUTABLE_SPEC:
            continue
        if key in _IMMUTABLE_SPEC:
            raise invalid(name, f"spec.{key}", "field is immutable")
        raise PermanentError(
            f'Job.batch "{name}": the simulated cluster does not model changing spec.{key} after creation; '
            f"it changes {', '.join(f'spec.{k}' for k in _MUTABLE_SPEC)}"
        )
    _check_template(name, old_spec, spec, mutable_scheduling=bool(old_spec.get("suspend")) and not started)
    return updated


def _check_metadata(name: str, stored: KubeObject, updated: KubeObject) -> None:
    metadata, old = updated.get("metadata"), stored["metadata"]
    if not isinstance(metadata, dict):
        raise invalid(name, "metadata", "Required value")
    for key in _FIXED_METADATA:
        if metadata.get(key) != old.get(key):
            raise invalid(name, f"metadata.{key}", "field is immutable")
    for key in ("labels", "annotations"):
        value = metadata.get(key)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
        ):
            raise invalid(name, f"metadata.{key}", "Invalid value: must map strings to strings")
    # Server-managed: a patch cannot set them.
    metadata["resourceVersion"] = old.get("resourceVersion")


def _check_template(
    name: str, old_spec: Mapping[str, Any], spec: dict[str, Any], *, mutable_scheduling: bool
) -> None:
    template, old_template = spec.get("template"), old_spec["template"]
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise invalid(name, "spec.template.spec", "Required value")
    metadata = template.get("metadata")
    if not isinstance(metadata, dict):
        raise invalid(name, "spec.template.metadata", "Required value")
    changed = _changed_fields(old_template, template)
    if not changed:
        return
    scheduling = (
        {f"spec.template.spec.{key}" for key in _SCHEDULING_SPEC}
        | {f"spec.template.metadata.{key}" for key in _SCHEDULING_METADATA}
        | {"spec.template.spec.affinity.nodeAffinity"}
    )
    other = [field for field in changed if field not in scheduling]
    if other:
        raise invalid(name, other[0], "field is immutable")
    if not mutable_scheduling:
        raise invalid(name, changed[0], f"field is immutable: {SCHEDULING_RULE}")
    selector = (old_spec.get("selector") or {}).get("matchLabels") or {}
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict) or any(labels.get(k) != v for k, v in selector.items()):
        raise invalid(
            name,
            "spec.template.metadata.labels",
            f"Invalid value: {labels!r}: `selector` does not match template `labels`",
        )


def _changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The template fields that differ, at the depth the scheduling rule needs, sorted."""
    changed: list[str] = []
    for part in sorted({*old, *new}):
        before, after = old.get(part), new.get(part)
        if before == after:
            continue
        if (
            part not in ("metadata", "spec")
            or not isinstance(before, Mapping)
            or not isinstance(after, Mapping)
        ):
            changed.append(f"spec.template.{part}")
            continue
        for key in sorted({*before, *after}):
            if _empty(before.get(key)) and _empty(after.get(key)):
                continue
            if before.get(key) == after.get(key):
                continue
            if part == "spec" and key == "affinity":
                changed.extend(_affinity_changes(before.get(key), after.get(key)))
            else:
                changed.append(f"spec.template.{part}.{key}")
    return sorted(changed)


def _affinity_changes(before: Any, after: Any) -> list[str]:
    before = before if isinstance(before, Mapping) else {}
    after = after if isinstance(after, Mapping) else {}
    changes = [
        f"spec.template.spec.affinity.{key}"
        for key in sorted({*before, *after})
        if not (_empty(before.get(key)) and _empty(after.get(key))) and before.get(key) != after.get(key)
    ]
    return changes


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []
