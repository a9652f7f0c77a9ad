"""Launch failures and backoff: when a group stops being asked for nodes, and for how long.

A failed scaling activity (no capacity, a quota, spot unavailable) or an instance that
is still not a ready GPU node past the provision timeout backs the group off at once,
from the check that notices it.
Each check that finds new failures doubles the backoff (base, 2x base, ... up to the
maximum); a group recovers when an instance launched after its last failure comes up
fine, or after a failure window without failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from squall.planner.inventory import GroupView, InstanceStatus
from squall.planner.model import Backoff, GiveBack, GroupHealth, Policy, ScalingFailure

# Substrings of the reasons AWS gives for failed scaling activities, by kind.
_FAILURE_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "spot capacity",
        ("spot", "unfulfillablecapacity", "maxspotinstancecountexceeded", "spotmaxpricetoolow"),
    ),
    (
        "insufficient capacity",
        ("insufficientinstancecapacity", "sufficient", "capacity-not-available", "insufficient capacity"),
    ),
    ("volume limit", ("volumelimitexceeded", "volume limit", "storage limit")),
    (
        "instance limit",
        (
            "instancelimitexceeded",
            "vcpulimitexceeded",
            "vcpu limit",
            "instance limit",
            "quota",
            "limit exceeded",
            "more running instance",
        ),
    ),
)
PROVISION_TIMEOUT = "provision timeout"
_LARGEST_DOUBLING = 16  # 2**16 times any sane base is far past any maximum


def classify_failure(reason: str) -> str:
    """The kind of a launch failure, from the words AWS uses for it."""
    lowered = reason.lower()
    for kind, markers in _FAILURE_KINDS:
        if any(marker in lowered for marker in markers):
            return kind
    return "launch failure"


def backoff_duration(consecutive_failures: int, policy: Policy) -> timedelta:
    """base, 2 x base, 4 x base, ... capped at the maximum."""
    doublings = min(max(consecutive_failures - 1, 0), _LARGEST_DOUBLING)
    return min(policy.backoff_base * (2**doublings), policy.backoff_max)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAssessment:
    health: GroupHealth
    in_backoff: bool
    change: Backoff | None  # set when the health must be persisted
    give_back: GiveBack | None


def assess_group(view: GroupView, *, previous: GroupHealth, policy: Policy, now: datetime) -> GroupAssessment:
    failures = _new_failures(view, previous=previous, policy=policy, now=now)
    if failures:
        health, reasons = _backed_off(view, previous=previous, failures=failures, policy=policy, now=now)
        change: Backoff | None = Backoff(group=view.group.name, health=health, reasons=reasons)
    else:
        health, change = _recovered(view, previous=previous, policy=policy, now=now)
    in_backoff = health.in_backoff(now)
    return GroupAssessment(
        health=health,
        in_backoff=in_backoff,
        change=change,
        give_back=_give_back(view, health) if in_backoff else None,
    )


def _new_failures(
    view: GroupView, *, previous: GroupHealth, policy: Policy, now: datetime
) -> list[ScalingFailure]:
    """Failures since the last one counted, within the window, including provision timeouts."""
    oldest = now - policy.failure_window
    seen = previous.last_failure_at
    failures = list(view.group.failures) + [
        ScalingFailure(
            time=i.instance.launch_time + policy.provision_timeout,
            reason=(
                f"{PROVISION_TIMEOUT}: instance {i.instance.instance_id} is not a ready node "
                f"with its GPUs {_minutes(policy.provision_timeout)} after launch"
            ),
        )
        for i in view.instances
        if i.status is InstanceStatus.TIMED_OUT and i.known_state
    ]
    return sorted(
        (f for f in failures if f.time >= oldest and f.time <= now and (seen is None or f.time > seen)),
        key=lambda f: f.time,
    )


def _backed_off(
    view: GroupView, *, previous: GroupHealth, failures: list[ScalingFailure], policy: Policy, now: datetime
) -> tuple[GroupHealth, tuple[str, ...]]:
    last = previous.last_failure_at
    health = launch_backoff(
        previous,
        failed_at=failures[-1].time,
        reason=_describe(failures[-1]),
        now=now,
        policy=policy,
        recovered=last is not None and view.ready_since_launch(last),
    )
    until = health.backoff_until.isoformat() if health.backoff_until else "?"
    reasons = (
        *(f"{_describe(f)} (at {f.time.isoformat()})" for f in failures[-3:]),
        f"backoff {_minutes(backoff_duration(health.consecutive_failures, policy))} "
        f"(failure {health.consecutive_failures} in a row) until {until}",
    )
    return health, reasons


def launch_backoff(
    previous: GroupHealth,
    *,
    failed_at: datetime,
    reason: str,
    now: datetime,
    policy: Policy,
    recovered: bool = False,
) -> GroupHealth:
    """The group's health after a launch failure at ``failed_at``: the one backoff rule.

    Used by the planner (failed scaling activities, provision timeouts it notices) and
    by the lifecycle service (a launch it abandoned). A failure at or before the last
    one counted is not counted again. The count starts afresh when the group had no
    failure, has ``recovered`` since the last one (an instance launched after it became
    a ready node) or the last one is a failure window old; otherwise each failure
    doubles the backoff up to the maximum. The backoff runs from ``now``, not from the
    failure (a failure noticed late still says the capacity is short), and a backoff
    already in force is never shortened.
    """
    last = previous.last_failure_at
    if last is not None and failed_at <= last:
        return previous
    fresh = (
        recovered
        or previous.consecutive_failures == 0
        or last is None
        or failed_at - last >= policy.failure_window
    )
    consecutive = 1 if fresh else previous.consecutive_failures + 1
    until = now + backoff_duration(consecutive, policy)
    if previous.backoff_until is not None and previous.backoff_until > until:
        until = previous.backoff_until
    return GroupHealth(
        backoff_until=until, consecutive_failures=consecutive, last_failure_at=failed_at, reason=reason
    )


def _recovered(
    view: GroupView, *, previous: GroupHealth, policy: Policy, now: datetime
) -> tuple[GroupHealth, Backoff | None]:
    """Forget past failures once the backoff is over and the group has shown it recovered."""
    last = previous.last_failure_at
    if previous.consecutive_failures == 0 or previous.in_backoff(now) or last is None:
        return previous, None
    if view.ready_since_launch(last):
        why = "an instance launched after the last failure became a ready node"
    elif now - last >= policy.failure_window:
        why = f"no launch failure for {_minutes(policy.failure_window)}"
    else:
        return previous, None
    # Keep last_failure_at, so that the old failures are never counted again.
    health = GroupHealth(last_failure_at=last)
    return health, Backoff(group=view.group.name, health=health, reasons=(f"recovered: {why}",))


def _give_back(view: GroupView, health: GroupHealth) -> GiveBack | None:
    """Desired capacity no instance exists for: AWS would keep retrying it, so return it."""
    group = view.group
    target = max(view.live_count, group.min_size)
    if group.desired <= target:
        return None
    return GiveBack(
        group=group.name,
        from_desired=group.desired,
        to_desired=target,
        reasons=(
            f"in backoff until {health.backoff_until.isoformat() if health.backoff_until else '?'} "
            f"({health.reason}); {group.desired - target} requested node(s) never launched",
        ),
    )


def _describe(failure: ScalingFailure) -> str:
    """'insufficient capacity: <reason as AWS words it>'"""
    if failure.reason.startswith(PROVISION_TIMEOUT):
        return failure.reason
    return f"{classify_failure(failure.reason)}: {failure.reason}"


def _minutes(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
