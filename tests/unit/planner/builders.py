"""Small builders for planner inputs, so each test states only what it is about."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from squall.planner import (
    GroupHealth,
    GroupInstance,
    Node,
    NodeGroup,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Plan,
    Pod,
    Policy,
    Resources,
    ScalingFailure,
    Taint,
    Toleration,
    plan,
)
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
# The policy these tests are written against (the deployment's defaults differ: see
# test_the_policy_defaults_are_the_deployments in test_offline.py).
POLICY = Policy(
    provision_timeout=timedelta(minutes=15), boot_grace=timedelta(minutes=10), max_scale_down_fraction=0.1
)
GPU_TAINT = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
TOLERATE_GPU = (Toleration(key="nvidia.com/gpu", operator="Exists"),)


def resources(cpu: str = "1", memory: str = "1Gi", gpu: int = 0, pods: int = 0) -> Resources:
    return Resources(cpu=parse_cpu_millicores(cpu), memory=parse_memory_bytes(memory), gpu=gpu, pods=pods)


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


def instance(instance_id: str, state: str = "InService", launched: datetime | None = None) -> GroupInstance:
    return GroupInstance(instance_id=instance_id, lifecycle_state=state, launch_time=launched or ago(hours=2))


def group(
    name: str = "p3-usw2",
    *,
    region: str = "us-west-2",
    instance_type: str | None = None,
    allocatable: Resources | None = None,
    gpu: bool = True,
    priority: int = 10,
    min_size: int = 0,
    max_size: int = 16,
    desired: int | None = None,
    instances: Sequence[GroupInstance] = (),
    failures: Sequence[ScalingFailure] = (),
    price: float | None = 3.06,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] | None = None,
) -> NodeGroup:
    """A p3.2xlarge-like GPU group by default; gpu=False gives a c5.4xlarge-like CPU group."""
    if allocatable is None:
        allocatable = resources("7800m", "55Gi", 1, 58) if gpu else resources("15800m", "28Gi", 0, 58)
    return NodeGroup(
        name=name,
        region=region,
        instance_type=instance_type or ("p3.2xlarge" if gpu else "c5.4xlarge"),
        allocatable=allocatable,
        labels=dict(labels or {}),
        taints=tuple(taints if taints is not None else ((GPU_TAINT,) if gpu else ())),
        priority=priority,
        min_size=min_size,
        max_size=max_size,
        desired=desired if desired is not None else len(instances),
        instances=tuple(instances),
        failures=tuple(failures),
        price_per_hour=price,
    )


def node_of(
    owner: NodeGroup,
    instance_id: str,
    *,
    name: str | None = None,
    ready: bool = True,
    gpus_ready: bool = True,
    unschedulable: bool = False,
    cordoned_by_squall: bool = False,
    ready_since: datetime | None = None,
    created_at: datetime | None = None,
) -> Node:
    """The node an instance of the group registers as."""
    allocatable = owner.allocatable
    if not gpus_ready:
        allocatable = Resources(cpu=allocatable.cpu, memory=allocatable.memory, gpu=0, pods=allocatable.pods)
    return Node(
        name=name or f"node-{instance_id}",
        allocatable=allocatable,
        labels={**owner.template_labels(), "kubernetes.io/hostname": name or instance_id},
        taints=owner.taints,
        instance_id=instance_id,
        ready=ready,
        unschedulable=unschedulable or cordoned_by_squall,
        cordoned_by_squall=cordoned_by_squall,
        ready_since=ready_since or ago(hours=2),
        created_at=created_at or ago(hours=2),
    )


def pod(
    name: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    job: str | None = None,
    node: str | None = None,
    phase: str | None = None,
    selector: Mapping[str, str] | None = None,
    affinity: Iterable[NodeSelectorRequirement] = (),
    tolerations: Sequence[Toleration] | None = None,
    daemonset: bool = False,
    finished_at: datetime | None = None,
    namespace: str = "team-a",
) -> Pod:
    """A pending pod by default; give node= for a running one. GPU pods tolerate the GPU taint."""
    requirements = tuple(affinity)
    if tolerations is None:
        tolerations = TOLERATE_GPU if gpu else ()
    return Pod(
        namespace=namespace,
        name=name,
        requests=resources(cpu, memory, gpu),
        node_selector=dict(selector or {}),
        required_affinity=(NodeSelectorTerm(match_expressions=requirements),) if requirements else (),
        tolerations=tuple(tolerations),
        job_id=job,
        node_name=node,
        phase=phase or ("Running" if node else "Pending"),
        daemonset=daemonset,
        finished_at=finished_at,
    )


def pending_pods(count: int, prefix: str = "p", **kwargs: object) -> list[Pod]:
    return [pod(f"{prefix}-{i}", **kwargs) for i in range(count)]  # type: ignore[arg-type]


def run_plan(
    *,
    nodes: Sequence[Node] = (),
    pods: Sequence[Pod] = (),
    groups: Sequence[NodeGroup] = (),
    health: Mapping[str, GroupHealth] | None = None,
    policy: Policy = POLICY,
    now: datetime = NOW,
) -> Plan:
    return plan(nodes=nodes, pods=pods, groups=groups, health=health or {}, policy=policy, now=now)


def scale_ups(result: Plan) -> dict[str, tuple[int, int]]:
    return {s.group: (s.from_desired, s.to_desired) for s in result.scale_ups}
