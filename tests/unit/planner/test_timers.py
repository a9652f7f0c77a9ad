"""The planner's timers: until when a plan stays the plan with nothing else changing."""

from __future__ import annotations

from datetime import timedelta

from squall.planner import GroupHealth, ScalingFailure
from squall.planner.timers import next_timer

from .builders import NOW, POLICY, ago, group, instance, node_of, pod, run_plan


def test_no_timer_runs_when_every_node_is_busy_and_nothing_boots() -> None:
    g = group(instances=[instance("i-1")])
    node = node_of(g, "i-1")
    busy = pod("p", gpu=1, node=node.name)
    assert next_timer(nodes=[node], pods=[busy], groups=[g], health={}, policy=POLICY, now=NOW) is None
    # and the plan is indeed the same a month later
    later = run_plan(nodes=[node], pods=[busy], groups=[g], now=NOW + timedelta(days=30))
    assert later == run_plan(nodes=[node], pods=[busy], groups=[g])


def test_an_empty_node_times_out_at_its_idle_threshold() -> None:
    g = group(instances=[instance("i-1", launched=ago(hours=3))])
    node = node_of(g, "i-1", ready_since=ago(minutes=4), created_at=ago(hours=3))
    assert next_timer(nodes=[node], pods=[], groups=[g], health={}, policy=POLICY, now=NOW) == (
        ago(minutes=4) + POLICY.idle_threshold
    )


def test_a_booting_instance_times_out_at_the_provision_timeout() -> None:
    g = group(instances=[instance("i-1", launched=ago(minutes=2))])
    assert next_timer(nodes=[], pods=[], groups=[g], health={}, policy=POLICY, now=NOW) == (
        ago(minutes=2) + POLICY.provision_timeout
    )


def test_a_backoff_ends_and_a_failure_leaves_the_window() -> None:
    failure = ScalingFailure(time=ago(minutes=20), reason="InsufficientInstanceCapacity")
    g = group(failures=[failure])
    health = {g.name: GroupHealth(backoff_until=NOW + timedelta(minutes=3), last_failure_at=ago(minutes=20))}
    assert next_timer(nodes=[], pods=[], groups=[g], health=health, policy=POLICY, now=NOW) == NOW + timedelta(
        minutes=3
    )
    health = {g.name: GroupHealth(last_failure_at=ago(minutes=20))}
    assert next_timer(nodes=[], pods=[], groups=[g], health=health, policy=POLICY, now=NOW) == (
        ago(minutes=20) + POLICY.failure_window
    )
