"""Scale-up rules: fit, existing and in-flight room, uncordon, bin-packing, group choice, gangs."""

from dataclasses import replace
from datetime import timedelta

from squall.planner import GroupHealth, Node, NodeSelectorRequirement
from squall.planner.model import REGION_LABEL

from .builders import (
    NOW,
    ago,
    group,
    instance,
    node_of,
    pending_pods,
    pod,
    resources,
    run_plan,
    scale_ups,
)

FOUR_GPU = resources("31800m", "240Gi", 4, 58)
EIGHT_GPU = resources("63800m", "480Gi", 8, 58)


def test_scales_from_zero_with_the_declared_template() -> None:
    # given
    gpus = group(desired=0)
    # when
    result = run_plan(groups=[gpus], pods=pending_pods(3, gpu=1, cpu="4", memory="16Gi"))
    # then
    assert scale_ups(result) == {"p3-usw2": (0, 3)}
    assert result.scale_ups[0].reasons[0].startswith("3 pending pod(s) need 3 new p3.2xlarge node(s)")
    assert result.unschedulable == ()


def test_free_room_on_ready_nodes_is_used_before_launching() -> None:
    # given: one ready, empty GPU node
    gpus = group(instances=[instance("i-1")])
    nodes = [node_of(gpus, "i-1")]
    # when
    one = run_plan(groups=[gpus], nodes=nodes, pods=pending_pods(1, gpu=1))
    two = run_plan(groups=[gpus], nodes=nodes, pods=pending_pods(2, gpu=1))
    # then
    assert one.scale_ups == ()
    assert scale_ups(two) == {"p3-usw2": (1, 2)}


def test_unmanaged_nodes_room_is_used_too() -> None:
    # given: a node no group owns
    node = Node(name="byo", allocatable=resources("8", "32Gi", 0, 110), labels={REGION_LABEL: "us-west-2"})
    # when
    result = run_plan(groups=[group(gpu=False)], nodes=[node], pods=pending_pods(3, cpu="2"))
    # then
    assert result.scale_ups == ()


def test_pods_per_node_limits_packing() -> None:
    # given: big nodes that take only 4 pods each
    small_pods = group(gpu=False, allocatable=resources("64", "256Gi", 0, 4))
    # when
    result = run_plan(groups=[small_pods], pods=pending_pods(10, cpu="100m", memory="100Mi"))
    # then
    assert scale_ups(result) == {"p3-usw2": (0, 3)}


def test_gpu_requests_choose_a_group_with_enough_gpus_per_node() -> None:
    # given
    one_gpu = group("p3-2x", desired=0)
    four_gpus = group("p3-8x", allocatable=FOUR_GPU, instance_type="p3.8xlarge", priority=20)
    # when
    result = run_plan(groups=[one_gpu, four_gpus], pods=[pod("quad", gpu=4, cpu="8")])
    # then
    assert scale_ups(result) == {"p3-8x": (0, 1)}


def test_a_pod_larger_than_any_group_is_unschedulable_with_the_reason_and_scales_nothing() -> None:
    # when
    result = run_plan(
        groups=[group("p3-2x"), group("p3-8x", allocatable=FOUR_GPU)], pods=[pod("huge", gpu=16)]
    )
    # then
    assert result.scale_ups == ()
    [entry] = result.unschedulable
    assert entry.pod == "team-a/huge"
    assert "fits no node and no node group" in entry.reason
    assert "insufficient nvidia.com/gpu (requests 16, node allocatable 1): p3-2x" in entry.reason
    assert "insufficient nvidia.com/gpu (requests 16, node allocatable 4): p3-8x" in entry.reason


def test_node_selector_picks_the_group_with_the_label() -> None:
    # given
    v100 = group("v100", labels={"squall.io/accelerator": "v100"}, priority=10)
    a100 = group("a100", labels={"squall.io/accelerator": "a100"}, priority=20)
    # when
    result = run_plan(groups=[v100, a100], pods=[pod("x", gpu=1, selector={"squall.io/accelerator": "a100"})])
    # then
    assert scale_ups(result) == {"a100": (0, 1)}


def test_node_affinity_not_in_and_exists() -> None:
    # given
    west = group("west", region="us-west-2", priority=10)
    east = group("east", region="us-east-1", priority=20, labels={"squall.io/efa": "true"})
    not_west = NodeSelectorRequirement(key=REGION_LABEL, operator="NotIn", values=("us-west-2",))
    efa = NodeSelectorRequirement(key="squall.io/efa", operator="Exists")
    in_west = NodeSelectorRequirement(key=REGION_LABEL, operator="In", values=("us-west-2",))
    # when
    result = run_plan(
        groups=[west, east],
        pods=[
            pod("a", gpu=1, affinity=[not_west]),
            pod("b", gpu=1, affinity=[efa]),
            pod("c", gpu=1, affinity=[in_west]),
        ],
    )
    # then
    assert scale_ups(result) == {"east": (0, 2), "west": (0, 1)}


def test_untolerated_taint_keeps_cpu_pods_off_gpu_groups() -> None:
    # given: the GPU group is preferred, but tainted
    gpus = group("gpus", priority=10)
    cpus = group("cpus", gpu=False, priority=20)
    # when
    result = run_plan(groups=[gpus, cpus], pods=pending_pods(2, cpu="2"))
    # then
    assert scale_ups(result) == {"cpus": (0, 1)}


def test_priority_comes_before_waste() -> None:
    # given: the preferred group wastes more
    wasteful = group("wasteful", priority=10)
    snug = group("snug", allocatable=FOUR_GPU, priority=20)
    # when
    result = run_plan(groups=[snug, wasteful], pods=pending_pods(4, gpu=1, cpu="7800m", memory="16Gi"))
    # then
    assert scale_ups(result) == {"wasteful": (0, 4)}


def test_least_waste_comes_before_price() -> None:
    # given: same priority; four pods fill a 4-GPU node exactly, or four 1-GPU nodes by half
    one_gpu = group("one", allocatable=resources("8", "64Gi", 1, 58), price=3.00)
    four_gpus = group("four", allocatable=resources("16", "64Gi", 4, 58), price=12.24)
    # when
    result = run_plan(groups=[one_gpu, four_gpus], pods=pending_pods(4, gpu=1, cpu="4", memory="16Gi"))
    # then
    assert scale_ups(result) == {"four": (0, 1)}


def test_price_breaks_the_tie() -> None:
    # given: same priority and template
    pricey = group("pricey", price=4.0)
    cheap = group("cheap", price=3.0)
    unpriced = group("unpriced", price=None)
    # when
    result = run_plan(groups=[pricey, unpriced, cheap], pods=pending_pods(2, gpu=1))
    # then
    assert scale_ups(result) == {"cheap": (0, 2)}


def test_max_size_is_respected_and_the_rest_spills_to_the_next_group() -> None:
    # given
    first = group("first", max_size=2, priority=10)
    second = group("second", priority=20)
    # when
    result = run_plan(groups=[first, second], pods=pending_pods(5, gpu=1))
    # then
    assert scale_ups(result) == {"first": (0, 2), "second": (0, 3)}
    spilled = dict((s.group, s.reasons) for s in result.scale_ups)["second"]
    assert "spilled over from first: at max size 2" in spilled


def test_a_group_at_max_is_never_scaled_past_it() -> None:
    # given: desired already at max
    full = group("full", max_size=3, desired=3)
    # when
    result = run_plan(groups=[full], pods=pending_pods(10, gpu=1))
    # then: the three launching nodes absorb three pods, the rest wait
    assert result.scale_ups == ()
    assert len(result.unschedulable) == 7
    assert "full at max size 3" in result.unschedulable[0].reason


def test_a_group_in_backoff_is_skipped_and_its_share_spills_to_another_region() -> None:
    # given
    west = group("p3-usw2", region="us-west-2", priority=10)
    east = group("p3-use1", region="us-east-1", priority=20)
    health = {"p3-usw2": GroupHealth(backoff_until=NOW + timedelta(minutes=5), consecutive_failures=1)}
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(2, gpu=1), health=health)
    # then
    assert scale_ups(result) == {"p3-use1": (0, 2)}
    assert any(
        r.startswith("spilled over from p3-usw2: in backoff until") for r in result.scale_ups[0].reasons
    )


# --- in-flight capacity ---------------------------------------------------------------


def test_launched_instances_without_nodes_count_as_capacity() -> None:
    # given: two instances launched a minute ago, not registered yet
    booting = group(
        instances=[
            instance("i-1", "Pending", ago(minutes=1)),
            instance("i-2", "Pending:Wait", ago(minutes=1)),
        ]
    )
    # when
    result = run_plan(groups=[booting], pods=pending_pods(2, gpu=1))
    # then
    assert result.scale_ups == ()


def test_desired_capacity_without_instances_yet_counts_as_capacity() -> None:
    # given: desired raised a moment ago, AWS has not created the instances yet
    launching = group(desired=3)
    # when
    three = run_plan(groups=[launching], pods=pending_pods(3, gpu=1))
    four = run_plan(groups=[launching], pods=pending_pods(4, gpu=1))
    # then
    assert three.scale_ups == ()
    assert scale_ups(four) == {"p3-usw2": (3, 4)}


def test_ready_nodes_without_their_gpus_yet_count_as_the_template() -> None:
    # given: the node is Ready but the device plugin has not advertised the GPU
    gpus = group(instances=[instance("i-1", launched=ago(minutes=3))])
    nodes = [node_of(gpus, "i-1", gpus_ready=False)]
    # when
    result = run_plan(groups=[gpus], nodes=nodes, pods=pending_pods(1, gpu=1))
    # then
    assert result.scale_ups == ()
    assert result.scale_downs == ()


def test_a_burst_never_double_scales_while_its_nodes_come_up() -> None:
    # given: a burst of pending pods
    gpus = group(max_size=50)
    pods = pending_pods(6, gpu=1) + pending_pods(4, "cpu", cpu="1")
    first = run_plan(groups=[gpus], pods=pods)
    [scale_up] = first.scale_ups
    # when: desired raised, no instance yet
    launching = replace(gpus, desired=scale_up.to_desired)
    then_launching = run_plan(groups=[launching], pods=pods)
    # and: instances booting, some registered but not ready
    ids = [f"i-{n}" for n in range(scale_up.to_desired)]
    booting = replace(launching, instances=tuple(instance(i, "Pending", ago(minutes=2)) for i in ids))
    not_ready = [node_of(booting, i, ready=False) for i in ids[:3]]
    then_booting = run_plan(groups=[booting], nodes=not_ready, pods=pods)
    # then
    assert scale_up.to_desired == 6
    assert then_launching.scale_ups == ()
    assert then_booting.scale_ups == ()


# --- uncordon before launch ------------------------------------------------------------


def test_nodes_squall_cordoned_are_uncordoned_and_subtracted_from_the_launch() -> None:
    # given
    gpus = group(instances=[instance("i-1")])
    cordoned = node_of(gpus, "i-1", cordoned_by_squall=True)
    # when
    result = run_plan(groups=[gpus], nodes=[cordoned], pods=pending_pods(3, gpu=1))
    # then
    assert [u.node for u in result.uncordons] == ["node-i-1"]
    assert "uncordoned before anything is launched" in result.uncordons[0].reasons[0]
    assert scale_ups(result) == {"p3-usw2": (1, 3)}


def test_nodes_cordoned_by_someone_else_stay_cordoned() -> None:
    # given
    gpus = group(instances=[instance("i-1")])
    cordoned = node_of(gpus, "i-1", unschedulable=True)
    # when
    result = run_plan(groups=[gpus], nodes=[cordoned], pods=pending_pods(1, gpu=1))
    # then
    assert result.uncordons == ()
    assert scale_ups(result) == {"p3-usw2": (1, 2)}


def test_a_cordoned_node_is_uncordoned_before_booting_capacity_is_counted_on() -> None:
    # given: one cordoned node (ready now) and one instance booting (minutes away)
    gpus = group(instances=[instance("i-1"), instance("i-2", "Pending", ago(minutes=1))])
    cordoned = node_of(gpus, "i-1", cordoned_by_squall=True)
    # when
    one = run_plan(groups=[gpus], nodes=[cordoned], pods=pending_pods(1, gpu=1))
    two = run_plan(groups=[gpus], nodes=[cordoned], pods=pending_pods(2, gpu=1))
    three = run_plan(groups=[gpus], nodes=[cordoned], pods=pending_pods(3, gpu=1))
    # then
    assert [u.node for u in one.uncordons] == ["node-i-1"] and one.scale_ups == ()
    assert [u.node for u in two.uncordons] == ["node-i-1"] and two.scale_ups == ()
    assert scale_ups(three) == {"p3-usw2": (2, 3)}


# --- bin-packing -------------------------------------------------------------------------


def test_identical_pods_are_packed_as_one_class() -> None:
    # when
    result = run_plan(
        groups=[group(allocatable=FOUR_GPU, max_size=100)], pods=pending_pods(100, gpu=1, cpu="4")
    )
    # then
    assert scale_ups(result) == {"p3-usw2": (0, 25)}
    assert "100x (cpu 4, memory 1Gi, nvidia.com/gpu 1)" in result.scale_ups[0].reasons[0]


def test_smaller_pods_fill_what_larger_ones_leave_on_new_nodes() -> None:
    # given: 3 x 2 GPUs + 2 x 1 GPU = 8 GPUs
    pods = pending_pods(3, "two", gpu=2, cpu="8") + pending_pods(2, "one", gpu=1, cpu="4")
    # when
    result = run_plan(groups=[group(allocatable=EIGHT_GPU)], pods=pods)
    # then
    assert scale_ups(result) == {"p3-usw2": (0, 1)}


# --- gangs -------------------------------------------------------------------------------


def test_a_jobs_replicas_stay_in_one_region() -> None:
    # given: the preferred region has room for only two of the four replicas
    west = group("west", region="us-west-2", max_size=2, priority=10)
    east = group("east", region="us-east-1", priority=20)
    gang = pending_pods(4, "job-1-worker", gpu=1, job="job-1")
    loose = pending_pods(4, "loose", gpu=1)
    # when
    together = run_plan(groups=[west, east], pods=gang)
    apart = run_plan(groups=[west, east], pods=loose)
    # then
    assert scale_ups(together) == {"east": (0, 4)}
    assert "keeps job(s) job-1 together in us-east-1" in together.scale_ups[0].reasons
    assert scale_ups(apart) == {"west": (0, 2), "east": (0, 2)}


def test_a_gang_no_single_region_can_hold_is_unschedulable_and_scales_nothing() -> None:
    # given
    west = group("west", region="us-west-2", max_size=2)
    east = group("east", region="us-east-1", max_size=2)
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(3, "w", gpu=1, job="big"))
    # then
    assert result.scale_ups == ()
    assert sorted(u.pod for u in result.unschedulable) == ["team-a/w-0", "team-a/w-1", "team-a/w-2"]
    reason = result.unschedulable[0].reason
    assert reason.startswith("job big needs all 3 pods in one region")
    assert "us-west-2:" in reason and "us-east-1:" in reason and "at max size 2" in reason


def test_pending_replicas_join_the_region_where_their_job_already_runs() -> None:
    # given: one replica of job-7 runs in us-east-1
    west = group("west", region="us-west-2", priority=10)
    east = group("east", region="us-east-1", priority=20, instances=[instance("i-e")])
    nodes = [node_of(east, "i-e")]
    running = pod("job-7-chief", gpu=1, job="job-7", node="node-i-e")
    # when
    result = run_plan(
        groups=[west, east], nodes=nodes, pods=[running, pod("job-7-worker", gpu=1, job="job-7")]
    )
    # then
    assert scale_ups(result) == {"east": (1, 2)}


def test_a_gang_held_in_a_full_region_is_stranded_only_if_another_region_could_take_it() -> None:
    # given: job-7's chief runs in east, which is at max size; its worker waits
    east = group("east", region="us-east-1", priority=20, max_size=1, instances=[instance("i-e")])
    running = pod("job-7-chief", gpu=1, job="job-7", node="node-i-e")
    waiting = pod("job-7-worker", gpu=1, job="job-7")
    full = node_of(east, "i-e")
    full = replace(full, allocatable=replace(full.allocatable, gpu=1))
    # when west has room for it, the gang is stranded (worth starting over there)
    west = group("west", region="us-west-2", priority=10)
    result = run_plan(groups=[west, east], nodes=[full], pods=[running, waiting])
    assert result.stranded == ("job-7",) and [u.pod for u in result.unschedulable] == ["team-a/job-7-worker"]
    # when west is full too, it waits where it is
    west = group("west", region="us-west-2", priority=10, max_size=0)
    result = run_plan(groups=[west, east], nodes=[full], pods=[running, waiting])
    assert result.stranded == () and [u.pod for u in result.unschedulable] == ["team-a/job-7-worker"]


def test_a_gang_takes_existing_room_in_another_region_before_new_nodes_in_the_preferred_one() -> None:
    # given: east is still launching four nodes (for this gang, an earlier check decided)
    west = group("west", region="us-west-2", priority=10)
    east = group("east", region="us-east-1", priority=20, desired=4)
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(4, "w", gpu=1, job="j"))
    # then
    assert result.scale_ups == ()
    assert result.unschedulable == ()


def test_a_gang_with_a_replica_that_fits_nowhere_scales_nothing() -> None:
    # when
    pods = [pod("j-ps", cpu="1", job="j"), pod("j-worker", gpu=64, job="j")]
    result = run_plan(groups=[group("gpus"), group("cpus", gpu=False)], pods=pods)
    # then
    assert result.scale_ups == ()
    assert len(result.unschedulable) == 2
    assert "insufficient nvidia.com/gpu" in result.unschedulable[0].reason


def test_full_existing_nodes_that_fit_are_named_in_the_reason() -> None:
    # given: a full unmanaged node with the label, and no group with it
    labels = {"squall.io/accelerator": "tpu", REGION_LABEL: "us-west-2"}
    full = Node(name="special", allocatable=resources("4", "8Gi", 0, 110), labels=labels)
    hog = pod("hog", cpu="4", node="special")
    # when
    result = run_plan(
        groups=[group(gpu=False)],
        nodes=[full],
        pods=[hog, pod("x", selector={"squall.io/accelerator": "tpu"})],
    )
    # then
    [entry] = result.unschedulable
    assert entry.reason.startswith("the existing nodes it fits are full, and it fits no node group")


def test_cpu_heavy_and_memory_heavy_pods_share_new_nodes() -> None:
    # given: 8 cpu-heavy and 8 memory-heavy pods; at least 4 nodes hold them all (memory)
    cpus = group(gpu=False, allocatable=resources("32", "128Gi", 0, 110))
    pods = pending_pods(8, "compute", cpu="8", memory="8Gi") + pending_pods(8, "cache", cpu="2", memory="56Gi")
    # when
    result = run_plan(groups=[cpus], pods=pods)
    # then: two of each per node; one shape per node would take 6
    assert scale_ups(result) == {"p3-usw2": (0, 4)}


def test_a_burst_that_spilled_during_a_backoff_waits_for_its_nodes_when_the_backoff_ends() -> None:
    # given: west was backed off, so the last check launched in east
    west = group("west", region="us-west-2", priority=10)
    east = group("east", region="us-east-1", priority=20)
    health = {"west": GroupHealth(backoff_until=NOW + timedelta(minutes=5), consecutive_failures=1)}
    loose = pending_pods(3, gpu=1)
    gang = pending_pods(2, "g", gpu=1, job="g")
    first = run_plan(groups=[west, east], pods=loose + gang, health=health)
    launched = [instance(f"i-{n}", "Pending", ago(minutes=1)) for n in range(5)]
    booting_east = replace(east, desired=5, instances=tuple(launched))
    # when: the backoff is over, east's nodes are still booting
    later = run_plan(groups=[west, booting_east], pods=loose + gang, now=NOW + timedelta(minutes=6))
    # then
    assert scale_ups(first) == {"east": (0, 5)}
    assert later.scale_ups == ()
