"""JobSpec -> Kubernetes manifests. Pure: the same spec and id always render the same objects.

One batch/v1 Job per replica, named ``<job-id>-<type>-<index>``, and for distributed
jobs one headless Service per replica with the same name, so each replica is
reachable at ``<name>.<namespace>.svc:2222`` as TF_CONFIG says. Such a name always
ends in a digit; a model service's objects (``<name>-model``, core/serving.py) never
do, so the two families cannot meet in a team namespace. An object found under a
name Squall is creating is kept only when its labels say it is that very job's
(`owned_alike`); otherwise creating fails with `name_taken`'s words, and the object
is neither adopted nor deleted (deletes go by label, never by name).

A queued job has no objects: its record in DynamoDB is the queue entry. The scale check
admits the whole job to one cluster and region (planner/admission.py) and creates its
objects there, let go and pinned to the region (``render(..., region=...)``). Rendered
without a region the Jobs are suspended: that is the shape the queue entry keeps of the
job's pods (core/queue.py). Priority, submission time and replica count ride on each Job
as annotations for people reading the cluster.

Retries: ``backoffLimit`` is the spec's ``retries`` and a pod failure policy fails
the Job at once on an application error (non-zero exit), so only infrastructure
loss (a pod disrupted by a drain, a spot reclaim, a lost node) consumes retries.

Every pod runs as the ``squall-job`` service account of its team namespace, which EKS
Pod Identity maps to the team's IAM role. A job with a ``codeUri`` gets it as
``SQUALL_CODE_URI`` and runs ``python -m trainer.launch -- <command> <args>``: the worker
image's launcher fetches the archive, checks its hash, unpacks it into a working
directory, installs its requirements.txt and runs the command there (``python -m
trainer`` when the spec names none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from squall.conventions import (
    ADMITTED_REGION_ANNOTATION,
    CAPACITY_TYPE_LABEL,
    GPU_RESOURCE,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MODEL_SERVICE_LABEL,
    NODE_GROUP_LABEL,
    OWNER_LABELS,
    PRIORITY_ANNOTATION,
    REGION_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    REPLICAS_ANNOTATION,
    REQUEUED_ANNOTATION,
    SUBMITTED_AT_ANNOTATION,
    TEAM_LABEL,
)
from squall.core.spec import TF_PORT, JobSpec, Replica, format_parameter

CONTAINER = "trainer"
# Job pods run as this service account in their team namespace: EKS Pod Identity gives
# it the team's IAM role (the CDK app creates the role and the association).
SERVICE_ACCOUNT = "squall-job"
# With a codeUri, the worker image's entrypoint fetches and checks the code, then runs
# the command there (worker_images/tf_trainer/trainer/launch.py).
LAUNCHER = ("python", "-m", "trainer.launch", "--")
DEFAULT_COMMAND = ("python", "-m", "trainer")

DEFAULT_TTL_AFTER_FINISHED = timedelta(hours=1)
SIGTERM_EXIT = 143  # 128 + SIGTERM: how a trainer stopped for a drain exits


def object_name(job_id: str, replica: Replica) -> str:
    return f"{job_id}-{replica.type}-{replica.index}"


def job_labels(job_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: "squall", JOB_ID_LABEL: job_id}


def job_selector(job_id: str) -> str:
    """Label selector for every object of one job."""
    return f"{MANAGED_BY_LABEL}=squall,{JOB_ID_LABEL}={job_id}"


def owned_alike(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> bool:
    """Is the object `found` under a name the very one Squall meant to create as `wanted`?

    Both are manifests (or objects as the API server returns them); their owner labels
    (conventions.OWNER_LABELS: managed-by, the job id and replica, the model service)
    must all agree, a label absent on one being absent on the other.
    """
    wanted_labels = _labels(wanted)
    found_labels = _labels(found)
    return all(wanted_labels.get(key) == found_labels.get(key) for key in OWNER_LABELS)


def name_taken(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> str:
    """Why creating `wanted` failed: `found` holds its name and is not that job's or service's."""
    metadata = found.get("metadata") or wanted.get("metadata") or {}
    where = f"{metadata.get('namespace')}/{metadata.get('name')}"
    return (
        f"{found.get('kind') or wanted.get('kind')} {where} exists already and belongs to "
        f"{_owner(found)}, not to {_owner(wanted)}: "
        "Squall neither adopts nor deletes it; remove it, or submit under another name"
    )


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _owner(obj: Mapping[str, Any]) -> str:
    labels = _labels(obj)

    def shown(key: str) -> str:
        return repr(str(labels[key])[:80])

    if labels.get(MANAGED_BY_LABEL) == "squall" and JOB_ID_LABEL in labels:
        replica = f" ({labels.get(REPLICA_TYPE_LABEL)}-{labels.get(REPLICA_INDEX_LABEL)})"
        return f"job {shown(JOB_ID_LABEL)}{replica if REPLICA_TYPE_LABEL in labels else ''}"
    if labels.get(MANAGED_BY_LABEL) == "squall" and MODEL_SERVICE_LABEL in labels:
        return f"model service {shown(MODEL_SERVICE_LABEL)}"
    return "no Squall job or model service"


def admission_patch(job: dict[str, Any], *, region: str) -> dict[str, Any]:
    """The merge patch that admits one suspended replica Job into `region` and lets it run.

    The region joins every required node-affinity term of its pod template (a job's
    replicas stay together there); the API server allows that while the Job is
    suspended and has never started, so a Job that ran before is only unsuspended.
    """
    patch: dict[str, Any] = {
        "metadata": {"annotations": {ADMITTED_REGION_ANNOTATION: region or "unknown"}},
        "spec": {"suspend": False},
    }
    if not region or (job.get("status") or {}).get("startTime"):
        return patch  # a node without a region label, or a Job that ran: nothing to pin
    pod_spec = job["spec"]["template"]["spec"]
    affinity = json.loads(json.dumps(pod_spec.get("affinity") or {}))
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    requirement = {"key": REGION_LABEL, "operator": "In", "values": [region]}
    for term in terms:
        expressions = [e for e in term.get("matchExpressions") or [] if e != requirement]
        term["matchExpressions"] = [*expressions, requirement]
    required["nodeSelectorTerms"] = terms
    patch["spec"]["template"] = {"spec": {"affinity": affinity}}
    return patch


def tf_config(spec: JobSpec, *, job_id: str, namespace: str, replica: Replica) -> str:
    """TF_CONFIG in the Kubeflow TFJob format, compact JSON with sorted roles."""
    cluster: dict[str, list[str]] = {}
    for other in spec.replica_list():
        cluster.setdefault(other.type, []).append(f"{object_name(job_id, other)}.{namespace}.svc:{TF_PORT}")
    config = {
        "cluster": dict(sorted(cluster.items())),
        "task": {"type": replica.type, "index": replica.index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def render(
    spec: JobSpec,
    *,
    job_id: str,
    namespace: str,
    ttl_after_finished: timedelta = DEFAULT_TTL_AFTER_FINISHED,
    submitted_at: datetime | None = None,
    requeued: bool = False,
    region: str | None = None,
    termination_grace: timedelta | None = None,
) -> list[dict[str, Any]]:
    """Every object Squall creates for one job: Jobs first, then Services.

    Without `region` the Jobs are suspended: the shape of a queued job (core/queue.py reads
    its pods from them). With the `region` admission chose, they are the objects admission
    creates: let go (not suspended) and pinned to that region (`admission_patch`).
    `submitted_at` and `requeued` ride along as annotations for people reading the cluster.
    `termination_grace`: how long its pods get from SIGTERM to checkpoint (a drain's eviction,
    a preemption); None: Kubernetes' default (30 s).
    """
    replicas = spec.replica_list()
    distributed = len(replicas) > 1
    annotations = {PRIORITY_ANNOTATION: str(spec.priority), REPLICAS_ANNOTATION: str(len(replicas))}
    if submitted_at is not None:
        annotations[SUBMITTED_AT_ANNOTATION] = submitted_at.isoformat()
    if requeued:
        annotations[REQUEUED_ANNOTATION] = "true"
    jobs = [
        _job(
            spec,
            job_id=job_id,
            namespace=namespace,
            replica=replica,
            distributed=distributed,
            ttl_after_finished=ttl_after_finished,
            annotations=annotations,
        )
        for replica in replicas
    ]
    if termination_grace is not None:
        for job in jobs:
            job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = int(
                termination_grace.total_seconds()
            )
    if region is not None:
        jobs = [_merged(job, admission_patch(job, region=region)) for job in jobs]
    services = (
        [_service(job_id=job_id, namespace=namespace, replica=r) for r in replicas] if distributed else []
    )
    return jobs + services


def _merged(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`target` with a JSON merge patch (RFC 7386) applied: maps merge, anything else replaces, null deletes."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = json.loads(json.dumps(value)) if isinstance(value, Mapping | list) else value
    return merged


def _metadata(*, name: str, namespace: str, job_id: str, spec: JobSpec, replica: Replica) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": job_labels(job_id)
        | {REPLICA_TYPE_LABEL: replica.type, REPLICA_INDEX_LABEL: str(replica.index), TEAM_LABEL: spec.team},
    }


def _job(
    spec: JobSpec,
    *,
    job_id: str,
    namespace: str,
    replica: Replica,
    distributed: bool,
    ttl_after_finished: timedelta,
    annotations: dict[str, str],
) -> dict[str, Any]:
    name = object_name(job_id, replica)
    metadata = _metadata(name=name, namespace=namespace, job_id=job_id, spec=spec, replica=replica)
    template_labels = dict(metadata["labels"])
    metadata["annotations"] = dict(annotations)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": SERVICE_ACCOUNT,
        # No Kubernetes API token: the job has no business with the API server. Pod
        # Identity does not need it either: its webhook mounts a token of its own
        # (audience pods.eks.amazonaws.com) whatever this says.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            _container(spec, job_id=job_id, namespace=namespace, replica=replica, distributed=distributed)
        ],
    }
    if replica.resources.gpu > 0:
        pod_spec["tolerations"] = gpu_tolerations()
    affinity = _affinity(spec, job_id=job_id, distributed=distributed)
    if affinity:
        pod_spec["affinity"] = affinity
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "backoffLimit": spec.retries,
            "activeDeadlineSeconds": int(spec.runtime_limit.total_seconds()),
            "ttlSecondsAfterFinished": int(ttl_after_finished.total_seconds()),
            "podFailurePolicy": {
                # The first matching rule wins: a pod evicted by a drain exits non-zero
                # (143 after SIGTERM), so the disruption rule must come first. The other
                # replicas of a drained job stop with 143 too (the trainer saves a
                # checkpoint and exits on SIGTERM or a lost peer): also a retry.
                "rules": [
                    {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {
                        "action": "Count",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": [SIGTERM_EXIT],
                        },
                    },
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                    },
                ]
            },
            "template": {"metadata": {"labels": template_labels}, "spec": pod_spec},
        },
    }


def _container(
    spec: JobSpec, *, job_id: str, namespace: str, replica: Replica, distributed: bool
) -> dict[str, Any]:
    env = [
        {"name": "SQUALL_JOB_ID", "value": job_id},
        {"name": "SQUALL_REPLICA_TYPE", "value": replica.type},
        {"name": "SQUALL_REPLICA_INDEX", "value": str(replica.index)},
    ]
    if distributed:
        env.append(
            {
                "name": "TF_CONFIG",
                "value": tf_config(spec, job_id=job_id, namespace=namespace, replica=replica),
            }
        )
    if spec.checkpoint_uri:
        env.append({"name": "SQUALL_CHECKPOINT_URI", "value": spec.checkpoint_uri})
    if spec.output_uri:
        env.append({"name": "SQUALL_OUTPUT_URI", "value": spec.output_uri})
    if spec.code_uri:
        env.append({"name": "SQUALL_CODE_URI", "value": spec.code_uri})
    for key, value in (spec.trial_parameters or {}).items():
        env.append({"name": f"SQUALL_PARAM_{key.upper()}", "value": format_parameter(value)})
    env.extend({"name": k, "value": v} for k, v in sorted(spec.env.items()))

    resources = replica.resources
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "env": env,
        "resources": container_resources(cpu=resources.cpu, memory=resources.memory, gpus=resources.gpu),
        "securityContext": container_security_context(),
    }
    if spec.code_uri:
        container["command"] = [*LAUNCHER, *(spec.command or DEFAULT_COMMAND)]
    elif spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if distributed:
        container["ports"] = [{"name": "tfjob-port", "containerPort": TF_PORT, "protocol": "TCP"}]
    return container


def gpu_tolerations() -> list[dict[str, Any]]:
    """What a pod asking for GPUs tolerates: the GPU groups' taint."""
    return [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]


def container_resources(*, cpu: str, memory: str, gpus: int) -> dict[str, dict[str, str]]:
    """A container's requests and limits: cpu and memory requested, memory limited, GPUs both."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {"memory": memory}
    if gpus > 0:
        # Extended resources cannot be overcommitted: requests must equal limits.
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    return {"requests": requests, "limits": limits}


def container_security_context() -> dict[str, Any]:
    """Every container Squall renders: never privileged, no privilege escalation, no capabilities."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _affinity(spec: JobSpec, *, job_id: str, distributed: bool) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = []
    placement = spec.placement
    if placement.regions:
        expressions.append({"key": REGION_LABEL, "operator": "In", "values": list(placement.regions)})
    if placement.node_groups:
        expressions.append({"key": NODE_GROUP_LABEL, "operator": "In", "values": list(placement.node_groups)})
    if placement.spot == "required":
        expressions.append({"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]})
    elif placement.spot == "never":
        expressions.append({"key": CAPACITY_TYPE_LABEL, "operator": "NotIn", "values": ["spot"]})
    affinity: dict[str, Any] = {}
    if expressions:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    if distributed:
        # All replicas of one job in one region (the cluster spans regions). The
        # region follows the GPU_RESOURCE replicas: CPU-only replicas (parameter servers)
        # may only join a region where a GPU_RESOURCE replica is bound already, so they
        # cannot take free CPU room in a region that has no GPUs left and pin the
        # whole gang there. The first GPU_RESOURCE replica matches its own term and so may
        # go anywhere, as kube-scheduler allows for the first pod of a group.
        selector: dict[str, Any] = {"matchLabels": {JOB_ID_LABEL: job_id}}
        leaders = sorted({r.type for r in spec.replica_list() if r.resources.gpu > 0})
        if leaders and len(leaders) < len({r.type for r in spec.replica_list()}):
            selector["matchExpressions"] = [{"key": REPLICA_TYPE_LABEL, "operator": "In", "values": leaders}]
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": REGION_LABEL}
            ]
        }
    return affinity


def _service(*, job_id: str, namespace: str, replica: Replica) -> dict[str, Any]:
    name = object_name(job_id, replica)
    labels = job_labels(job_id) | {REPLICA_TYPE_LABEL: replica.type, REPLICA_INDEX_LABEL: str(replica.index)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            # Peers must resolve before the pod is Ready, or TF's gRPC setup stalls.
            "publishNotReadyAddresses": True,
            "selector": labels,
            "ports": [{"name": "tfjob-port", "port": TF_PORT, "targetPort": TF_PORT, "protocol": "TCP"}],
        },
    }
