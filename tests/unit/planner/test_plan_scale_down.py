"""Scale-down: only empty nodes, idle past the threshold and the boot grace, within bounds."""

from dataclasses import replace
from datetime import timedelta

from squall.planner import Node, NodeGroup, Policy

from .builders import ago, group, instance, node_of, pending_pods, pod, resources, run_plan


def idle_group(
    count: int, *, min_size: int = 0, launched_hours_ago: float = 3
) -> tuple[NodeGroup, list[Node]]:
    """A group whose `count` nodes have been ready (and empty) for 2h, 2h-1m, 2h-2m, ..."""
    members = group(
        "gpus",
        min_size=min_size,
        max_size=max(count, 1) * 2,
        instances=[instance(f"i-{n}", launched=ago(hours=launched_hours_ago)) for n in range(count)],
    )
    nodes = [node_of(members, f"i-{n}", ready_since=ago(minutes=120 - n)) for n in range(count)]
    return members, nodes


def test_an_empty_node_idle_past_the_threshold_is_removed_by_instance() -> None:
    # given
    members, nodes = idle_group(1)
    # when
    result = run_plan(groups=[members], nodes=nodes)
    # then
    [removal] = result.scale_downs
    assert (removal.node, removal.instance, removal.group) == ("node-i-0", "i-0", "gpus")
    assert removal.reasons == (
        "empty: nothing but DaemonSet/mirror pods",
        "idle for 2h00m (threshold 10m)",
        "gpus goes from 1 to 0 (min size 0)",
    )
    # never by lowering desired capacity: AWS would pick the victim
    assert result.give_backs == () and result.scale_ups == ()


def test_a_busy_node_is_never_removed() -> None:
    # given
    members, nodes = idle_group(1)
    work = pod("train", gpu=1, node="node-i-0")
    # when
    result = run_plan(groups=[members], nodes=nodes, pods=[work])
    # then
    assert result.scale_downs == ()


def test_daemonset_and_mirror_pods_do_not_make_a_node_busy() -> None:
    # given
    members, nodes = idle_group(1)
    agent = pod("dcgm-exporter", cpu="100m", node="node-i-0", daemonset=True)
    # when
    result = run_plan(groups=[members], nodes=nodes, pods=[agent])
    # then
    assert [d.node for d in result.scale_downs] == ["node-i-0"]


def test_idle_time_runs_from_the_last_pod_that_finished_there() -> None:
    # given
    members, nodes = idle_group(1)
    recent = pod("done", node="node-i-0", phase="Succeeded", finished_at=ago(minutes=5))
    earlier = pod("done", node="node-i-0", phase="Succeeded", finished_at=ago(minutes=15))
    # when
    kept = run_plan(groups=[members], nodes=nodes, pods=[recent])
    removed = run_plan(groups=[members], nodes=nodes, pods=[earlier])
    # then
    assert kept.scale_downs == ()
    assert [d.node for d in removed.scale_downs] == ["node-i-0"]
    assert "idle for 15m" in removed.scale_downs[0].reasons[1]


def test_a_node_within_its_boot_grace_is_kept() -> None:
    # given: launched five minutes ago, no idle threshold at all
    members, nodes = idle_group(1, launched_hours_ago=5 / 60)
    policy = Policy(idle_threshold=timedelta(0), boot_grace=timedelta(minutes=10))
    # when
    result = run_plan(groups=[members], nodes=nodes, policy=policy)
    # then
    assert result.scale_downs == ()


def test_a_group_never_goes_below_its_min_size() -> None:
    # given
    at_min, at_min_nodes = idle_group(3, min_size=3)
    above_min, above_min_nodes = idle_group(3, min_size=2)
    everything = Policy(max_scale_down_fraction=1.0)
    # when
    kept = run_plan(groups=[at_min], nodes=at_min_nodes, policy=everything)
    one_removed = run_plan(groups=[above_min], nodes=above_min_nodes, policy=everything)
    # then
    assert kept.scale_downs == ()
    assert len(one_removed.scale_downs) == 1


def test_at_most_a_bounded_fraction_per_check_longest_idle_first() -> None:
    # given: 20 idle nodes, 10% per check
    members, nodes = idle_group(20)
    # when
    result = run_plan(groups=[members], nodes=nodes, policy=Policy(max_scale_down_fraction=0.1))
    # then
    assert [d.node for d in result.scale_downs] == ["node-i-0", "node-i-1"]


def test_a_node_that_pending_pods_fit_on_is_not_idle() -> None:
    # given
    members, nodes = idle_group(1)
    # when
    result = run_plan(groups=[members], nodes=nodes, pods=pending_pods(1, gpu=1))
    # then
    assert result.scale_downs == ()
    assert result.scale_ups == ()


def test_nodes_cordoned_by_someone_else_and_unmanaged_nodes_are_left_alone() -> None:
    # given
    members, _ = idle_group(1)
    admin_cordoned = node_of(members, "i-0", unschedulable=True, ready_since=ago(hours=2))
    unmanaged = Node(name="byo", allocatable=resources("8", "32Gi", 0, 110), ready_since=ago(hours=5))
    # when
    result = run_plan(groups=[members], nodes=[admin_cordoned, unmanaged])
    # then
    assert result.scale_downs == ()


def test_an_instance_already_terminating_is_not_removed_again() -> None:
    # given
    members = group("gpus", desired=0, instances=[instance("i-0", "Terminating:Wait")])
    nodes = [node_of(members, "i-0", ready_since=ago(hours=2), cordoned_by_squall=True)]
    # when
    result = run_plan(groups=[members], nodes=nodes)
    # then
    assert result.scale_downs == ()
    assert result.uncordons == ()


def test_a_node_squall_cordoned_earlier_whose_instance_is_still_in_service_is_removed_again() -> None:
    # given: an earlier check cordoned it, the terminate call never happened
    members, _ = idle_group(1)
    cordoned = node_of(members, "i-0", cordoned_by_squall=True, ready_since=ago(hours=2))
    # when
    result = run_plan(groups=[members], nodes=[cordoned])
    # then
    assert [d.instance for d in result.scale_downs] == ["i-0"]
    assert result.uncordons == ()


def test_a_group_scaling_up_removes_nothing() -> None:
    # given: the idle node predates a label the pending pod selects
    members, nodes = idle_group(1)
    relabelled = replace(members, labels={"gen": "2"})
    # when
    result = run_plan(groups=[relabelled], nodes=nodes, pods=[pod("x", gpu=1, selector={"gen": "2"})])
    # then
    assert [s.group for s in result.scale_ups] == ["gpus"]
    assert result.scale_downs == ()


def test_idle_time_runs_from_when_squall_first_found_the_node_empty() -> None:
    # given an old node whose last job's pods were already cleaned up
    members, [node] = idle_group(1)
    just_emptied = replace(node, empty_since=ago(minutes=3))
    long_empty = replace(node, empty_since=ago(minutes=30))
    # then the stamp, not the node's age, decides
    assert run_plan(groups=[members], nodes=[just_emptied]).scale_downs == ()
    assert len(run_plan(groups=[members], nodes=[long_empty]).scale_downs) == 1
