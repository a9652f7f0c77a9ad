"""What the scale check reads of a plan, pure: the gangs stranded in a region, the fallbacks,
whether it asks for anything, and the groups as the fleet has them now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from squall.core.jobs import Reason, reason_code
from squall.planner import (
    REGION_LABEL,
    GroupHealth,
    GroupInstance,
    Node,
    NodeGroup,
    Plan,
    Pod,
    ScalingFailure,
)
from squall.planner.sites import split_site
from squall.ports import FleetGroup


@dataclass(frozen=True)
class StrandedGang:
    job_id: str
    namespace: str
    region: str
    why: str
    node: str  # one it has a pod bound on (as the planner names it): says which cluster


def stranded_gangs(decided: Plan, *, pods: Sequence[Pod], nodes: Sequence[Node]) -> list[StrandedGang]:
    """Gangs with pods bound in a region that cannot take the rest, while another region could.

    Kubernetes binds a gang's pods one by one: a parameter server can take free
    room in a region before the planner learns that the region has no GPUs left.
    The required region affinity then holds the rest of the gang there for good.
    Where no region has room, the gang waits where it is: starting it over would
    only queue it again (the planner's `stranded`).
    """
    reasons = {u.pod: u.reason for u in decided.unschedulable}
    stranded = set(decided.stranded)
    stuck: dict[str, str] = {}
    for pod in pods:
        if pod.job_id in stranded and pod.key in reasons:
            stuck.setdefault(pod.job_id, reasons[pod.key])
    region_of = {n.name: n.labels.get(REGION_LABEL, "") for n in nodes}
    bound: dict[str, StrandedGang] = {}
    for pod in pods:
        if pod.job_id in stuck and pod.is_active and pod.is_workload and pod.job_id not in bound:
            bound[pod.job_id] = StrandedGang(
                job_id=pod.job_id,
                namespace=pod.namespace,
                region=split_site(region_of.get(pod.node_name or "", ""))[1],
                why=stuck[pod.job_id],
                node=pod.node_name or "",
            )
    return [bound[job_id] for job_id in sorted(bound)]


def fallbacks(
    decided: Plan, *, groups: Sequence[NodeGroup], health: Mapping[str, GroupHealth], now: datetime
) -> list[str]:
    """`RegionFallback:<from>-><to>` for each scale-up that a backed-off preferred group forced elsewhere."""
    backed_off = {b.group: b.health for b in decided.backoffs} | dict(health)
    by_name = {g.name: g for g in groups}
    found = []
    for scale_up in decided.scale_ups:
        target = by_name[scale_up.group]
        preferred = [
            g
            for g in groups
            if g.priority < target.priority
            and g.region != target.region
            and backed_off.get(g.name, GroupHealth()).in_backoff(now)
        ]
        if preferred:
            origin = min(preferred, key=lambda g: g.priority)
            found.append(reason_code(Reason.REGION_FALLBACK, f"{origin.region}->{target.region}"))
    return found


def plan_acts(decided: Plan) -> bool:
    """Does the plan ask for anything to be done?"""
    return bool(
        decided.scale_ups
        or decided.uncordons
        or decided.scale_downs
        or decided.backoffs
        or decided.give_backs
        or decided.stranded
    )


def scaling(decided: Plan) -> str:
    """What is being bought, for the queue's messages: `p3-usw2 scaling 2->6`."""
    return "; ".join(f"{s.group} scaling {s.from_desired}->{s.to_desired}" for s in decided.scale_ups[:3])


def with_live_state(
    template: NodeGroup, observed: FleetGroup, failures: list[ScalingFailure], now: datetime
) -> NodeGroup:
    instances = tuple(
        GroupInstance(
            instance_id=i.instance_id,
            lifecycle_state=i.lifecycle_state,
            # Without a launch time the instance counts from now: it is not timed out yet.
            launch_time=i.launch_time or now,
        )
        for i in observed.instances
    )
    max_size = min(template.max_size, observed.max_size)
    return dataclasses.replace(
        template,
        desired=observed.desired,
        min_size=min(max(template.min_size, observed.min_size), max_size),
        max_size=max_size,
        instances=instances,
        failures=tuple(failures),
    )


def all_placed(pods: Sequence[Pod], job_ids: Sequence[str]) -> bool:
    """Every job named has its pods, and none of them waits for room.

    Pods of other jobs that wait were there at an earlier check, which acted on
    them; the scheduled check looks at them again within a minute. A job whose pods
    are not there yet (the Job controller creates them a moment after the Job) may
    still need room.
    """
    named = set(job_ids)
    present: set[str] = set()
    for pod in pods:
        if pod.job_id in named:
            if pod.is_pending:
                return False
            present.add(pod.job_id)
    return present == named
