"""core/costs.py: pods' shares of their nodes, jobs' rates, the fleet's overhead, months."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from squall.conventions import NODE_GROUP_LABEL, REGION_LABEL
from squall.core import costs
from squall.core.costs import FleetAccrual, JobRate, UnpricedError
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.planner import GroupInstance, Node, NodeGroup, Pod, Resources
from squall.planner.model import INSTANCE_TYPE_LABEL, Policy

T0 = datetime(2026, 3, 31, 23, 0, tzinfo=UTC)
GIB = 1024**3
GPU_NODE = Resources(cpu=32_000, memory=244 * GIB, gpu=4, pods=58)
CPU_NODE = Resources(cpu=16_000, memory=64 * GIB, pods=58)


def group(name: str = "p3", *, price: float | None = 12.0, spot: bool = False, **fields: object) -> NodeGroup:
    values: dict[str, object] = {
        "name": name,
        "region": "us-west-2",
        "instance_type": "p3.8xlarge",
        "allocatable": GPU_NODE,
        "max_size": 10,
        "price_per_hour": price,
        "spot": spot,
    }
    values.update(fields)
    return NodeGroup(**values)  # type: ignore[arg-type]


def node(
    name: str, *, of: NodeGroup | None = None, allocatable: Resources = GPU_NODE, **fields: object
) -> Node:
    labels = {NODE_GROUP_LABEL: of.name, **of.template_labels()} if of is not None else {}
    return Node(name=name, allocatable=allocatable, labels=labels, **fields)  # type: ignore[arg-type]


def pod(
    name: str, *, on: str | None, gpu: int = 0, cpu: int = 0, memory: int = 0, job: str | None = "j-1"
) -> Pod:
    return Pod(
        namespace="team-a",
        name=name,
        requests=Resources(cpu=cpu, memory=memory, gpu=gpu),
        job_id=job,
        node_name=on,
        phase="Running" if on else "Pending",
    )


def job(**fields: object) -> Job:
    values: dict[str, object] = {
        "id": "j-1",
        "name": "train",
        "team": "research",
        "namespace": "team-research",
        "status": JobStatus.RUNNING,
        "reason": "Started",
        "submitted_at": T0 - timedelta(hours=2),
        "updated_at": T0 - timedelta(hours=1),
        "started_at": T0 - timedelta(hours=1),
        "gpus": 2,
    }
    values.update(fields)
    return Job(**values)  # type: ignore[arg-type]


# ---- shares and rates --------------------------------------------------------


def test_a_gpu_nodes_share_is_by_gpus_whatever_cpu_and_memory_the_pod_asks() -> None:
    gpu_node = node("n1")
    assert costs.pod_share(pod("a", on="n1", gpu=1, cpu=30_000, memory=200 * GIB), gpu_node) == 0.25
    assert costs.pod_share(pod("b", on="n1", gpu=0, cpu=30_000), gpu_node) == 0.0


def test_a_cpu_nodes_share_is_the_largest_of_cpu_and_memory() -> None:
    cpu_node = node("c1", allocatable=CPU_NODE)
    assert costs.pod_share(pod("a", on="c1", cpu=4_000, memory=32 * GIB), cpu_node) == 0.5
    assert costs.pod_share(pod("b", on="c1", cpu=16_000, memory=1 * GIB), cpu_node) == 1.0


def test_a_gpu_node_whose_gpus_are_not_advertised_yet_is_shared_by_its_groups_gpus() -> None:
    p3 = group()
    booting = node("n1", of=p3, allocatable=Resources(cpu=32_000, memory=244 * GIB, pods=58))
    assert costs.pod_share(pod("a", on="n1", gpu=2), booting, p3) == 0.5


def test_a_jobs_rate_adds_its_pods_shares_of_their_groups_prices_and_spot_savings() -> None:
    on_demand = group("od", price=12.0)
    spot = group("spot", price=4.0, spot=True, on_demand_price_per_hour=12.0)
    nodes = [node("n1", of=on_demand), node("n2", of=spot)]
    pods = [pod("a", on="n1", gpu=2), pod("b", on="n2", gpu=1), pod("c", on=None, gpu=1)]
    rate = costs.job_rate(pods=pods, nodes=nodes, groups=[on_demand, spot])
    assert rate == JobRate(dollars_per_hour=0.5 * 12 + 0.25 * 4, savings_per_hour=0.25 * 8)


@pytest.mark.parametrize(
    ("groups", "why"),
    [
        ([], "matches no configured node group"),
        ([group(price=None)], "has no price per hour"),
    ],
)
def test_a_job_on_a_node_that_cannot_be_priced_says_why(groups: list[NodeGroup], why: str) -> None:
    nodes = [node("n1", of=group())]
    with pytest.raises(UnpricedError, match=why):
        costs.job_rate(pods=[pod("a", on="n1", gpu=1)], nodes=nodes, groups=groups)


def test_a_job_with_no_bound_pod_or_on_an_unlisted_node_cannot_be_priced() -> None:
    with pytest.raises(UnpricedError, match="none of its pods"):
        costs.job_rate(pods=[pod("a", on=None)], nodes=[], groups=[group()])
    with pytest.raises(UnpricedError, match="not listed"):
        costs.job_rate(pods=[pod("a", on="gone")], nodes=[], groups=[group()])


def test_nodes_join_their_group_by_instance_then_by_label_then_by_template_labels() -> None:
    with_instance = group(
        "a", instances=(GroupInstance(instance_id="i-1", lifecycle_state="InService", launch_time=T0),)
    )
    other = group("b", price=20.0, instance_type="p4d.24xlarge")
    assert (
        costs.NodeGroups([other, with_instance]).of(Node(name="x", allocatable=GPU_NODE, instance_id="i-1"))
        is with_instance
    )
    assert costs.NodeGroups([with_instance, other]).of(node("y", of=other)) is other
    labelled = Node(
        name="z",
        allocatable=GPU_NODE,
        labels={REGION_LABEL: "us-west-2", INSTANCE_TYPE_LABEL: "p4d.24xlarge"},
    )
    assert costs.NodeGroups([with_instance, other]).of(labelled) is other


def test_a_node_two_groups_of_different_prices_could_own_belongs_to_neither() -> None:
    cheap, dear = group("cheap", price=4.0), group("dear", price=12.0)
    labels = {REGION_LABEL: "us-west-2", INSTANCE_TYPE_LABEL: "p3.8xlarge"}
    assert costs.NodeGroups([cheap, dear]).of(Node(name="n", allocatable=GPU_NODE, labels=labels)) is None
    same = dataclasses.replace(dear, name="same", price_per_hour=4.0)
    assert costs.NodeGroups([cheap, same]).of(Node(name="n", allocatable=GPU_NODE, labels=labels)) is cheap


# ---- overhead ------------------------------------------------------------------


def test_overhead_is_what_no_job_held_plus_booting_instances_whole() -> None:
    instances = tuple(
        GroupInstance(instance_id=f"i-{n}", lifecycle_state=state, launch_time=T0)
        for n, state in ((1, "InService"), (2, "InService"), (3, "Pending"), (4, "Terminating:Wait"))
    )
    p3 = group(instances=instances)
    nodes = [node("n1", of=p3, instance_id="i-1"), node("n2", of=p3, instance_id="i-2")]
    pods = [
        pod("a", on="n1", gpu=3),
        pod("ds", on="n1", gpu=0, cpu=100, job=None),  # a DaemonSet's: holds nothing of the price
        # finished: holds nothing any more
        Pod(
            namespace="team-a",
            name="done",
            requests=Resources(gpu=4),
            job_id="j-2",
            node_name="n2",
            phase="Succeeded",
        ),
    ]
    rates = costs.overhead_rates(nodes=nodes, pods=pods, groups=[p3])
    # n1: a quarter unheld; n2: all of it; i-3 booting: whole; i-4 leaving: not billed as booting
    assert rates == {"p3": pytest.approx(12 * (0.25 + 1 + 1))}


def test_jobs_and_overhead_add_up_to_the_fleets_cost() -> None:
    p3 = group()
    nodes = [node("n1", of=p3), node("n2", of=p3)]
    pods = [pod("a", on="n1", gpu=1), pod("b", on="n2", gpu=2, job="j-2")]
    jobs = (
        costs.job_rate(pods=pods[:1], nodes=nodes, groups=[p3]).dollars_per_hour
        + costs.job_rate(pods=pods[1:], nodes=nodes, groups=[p3]).dollars_per_hour
    )
    overhead = costs.overhead_rates(nodes=nodes, pods=pods, groups=[p3])["p3"]
    assert jobs + overhead == pytest.approx(2 * 12.0)


def test_overhead_between_two_checks_is_split_at_the_month_boundary() -> None:
    last = FleetAccrual(at=T0 + timedelta(minutes=30), rates={"p3": 12.0, "idle": 0.0})
    rows = costs.overhead_between(last, T0 + timedelta(hours=2))
    assert [(r.group, r.month, round(r.dollars, 6)) for r in rows] == [
        ("p3", "2026-03", 6.0),
        ("p3", "2026-04", 12.0),
    ]
    assert costs.overhead_between(last, last.at) == []


# ---- whose overhead ----------------------------------------------------------

TEAMS = {"r-1": "research", "r-2": "research", "v-1": "vision", "old": "research", "s-1": "speech"}


def causes(demand: list[Pod] | None = None, **policy: timedelta) -> costs.OverheadCauses:
    return costs.OverheadCauses(team_of=lambda: TEAMS, demand=demand, policy=Policy(**policy))


def booting(*launched: timedelta) -> tuple[GroupInstance, ...]:
    """Instances launched this long before T0, with no node yet."""
    return tuple(
        GroupInstance(instance_id=f"i-{n}", lifecycle_state="Pending", launch_time=T0 - ago)
        for n, ago in enumerate(launched)
    )


def waiting(name: str, *, job: str | None, gpu: int, region: str | None = None) -> Pod:
    return Pod(
        namespace="team-a",
        name=name,
        requests=Resources(cpu=1000, gpu=gpu),
        job_id=job,
        node_selector={REGION_LABEL: region} if region else {},
    )


def caused(accrual: FleetAccrual) -> dict[str, dict[str, float]]:
    return {group: {t: round(v, 6) for t, v in teams.items()} for group, teams in accrual.caused.items()}


def test_booting_capacity_goes_to_the_teams_whose_waiting_pods_fit_it_by_the_share_they_ask() -> None:
    # given two booting p3 instances ($24/h) and the demand the plan places
    p3 = group(instances=booting(timedelta(minutes=2), timedelta(minutes=3)))
    demand = [
        waiting("r-1-0", job="r-1", gpu=4),  # a whole node
        waiting("r-2-0", job="r-2", gpu=1),
        waiting("v-1-0", job="v-1", gpu=2),
        waiting("v-1-1", job="v-1", gpu=1),
        waiting("x-0", job="unknown", gpu=1),  # no team known for it: its part stays unattributed
        waiting("far", job="s-1", gpu=1, region="eu-west-1"),  # fits no p3 node: not its buyer
        waiting("big", job="s-1", gpu=8),  # larger than a p3 node: not its buyer either
        waiting("cpu", job="s-1", gpu=0),  # asks no GPU of a GPU node: nothing
    ]
    accrual = costs.attribute_overhead(nodes=[], pods=[], groups=[p3], now=T0, causes=causes(demand))
    # then $24/h is split by the GPUs asked: research 5, vision 3, unknown 1 (of 9)
    assert accrual.rates == {"p3": pytest.approx(24.0)}
    assert caused(accrual) == {"p3": {"research": round(24 * 5 / 9, 6), "vision": round(24 * 3 / 9, 6)}}
    assert accrual.buyers == {"p3": {"research": 1.25, "vision": 0.75, costs.OTHERS: 0.25}}
    # and the interval to the next check is charged so: per team, and the unattributed rest
    rows = costs.overhead_between(accrual, T0 + timedelta(minutes=30))
    assert [(r.team, round(r.dollars, 6)) for r in rows] == [
        ("research", round(12 * 5 / 9, 6)),
        ("vision", round(12 * 3 / 9, 6)),
        (None, round(12 * 1 / 9, 6)),
    ]
    assert sum(r.dollars for r in rows) == pytest.approx(12.0)


def test_pending_job_pods_in_the_cluster_are_buyers_too_and_a_node_not_up_yet_is_booting() -> None:
    # given a node registered but not Ready yet, launched a minute ago, and a pod waiting for it
    p3 = group(instances=booting(timedelta(minutes=1)))
    nodes = [node("n1", of=p3, instance_id="i-0", ready=False)]
    pods = [pod("v-1-0", on=None, gpu=4, job="v-1")]
    accrual = costs.attribute_overhead(nodes=nodes, pods=pods, groups=[p3], now=T0, causes=causes([]))
    assert caused(accrual) == {"p3": {"vision": 12.0}}


def test_booting_past_the_provision_timeout_draining_and_partly_used_nodes_are_unattributed() -> None:
    p3 = group(instances=booting(timedelta(minutes=20)))  # past the 10 minutes: a failure, nobody's
    nodes = [
        node("part", of=p3),
        node("cordoned", of=p3, unschedulable=True),
        node("late", of=p3, ready=False, created_at=T0 - timedelta(minutes=30)),
    ]
    pods = [
        pod("a", on="part", gpu=2, job="r-1"),
        Pod(namespace="team-a", name="done", job_id="v-1", node_name="cordoned", phase="Succeeded",
            requests=Resources(gpu=4), finished_at=T0 - timedelta(minutes=1)),
    ]  # fmt: skip
    demand = [waiting("r-2-0", job="r-2", gpu=4)]
    accrual = costs.attribute_overhead(nodes=nodes, pods=pods, groups=[p3], now=T0, causes=causes(demand))
    assert accrual.rates == {"p3": pytest.approx(6 + 12 + 12 + 12)}
    assert accrual.caused == {}


def test_an_empty_node_is_kept_warm_for_the_team_whose_job_ended_on_it_last_a_while() -> None:
    p3 = group()
    nodes = [node("n1", of=p3), node("n2", of=p3), node("n3", of=p3)]

    def ended(name: str, job: str, on: str, ago: timedelta) -> Pod:
        return Pod(namespace="team-a", name=name, job_id=job, node_name=on, phase="Succeeded",
                   requests=Resources(gpu=4), finished_at=T0 - ago)  # fmt: skip

    pods = [
        ended("old-0", "old", "n1", timedelta(minutes=8)),
        ended("v-1-0", "v-1", "n1", timedelta(minutes=3)),  # the last to end on n1
        ended("r-1-0", "r-1", "n2", timedelta(minutes=12)),  # past the 10 minutes: nobody's now
        ended("x-0", "gone", "n3", timedelta(minutes=1)),  # a job no team is known for
    ]
    accrual = costs.attribute_overhead(nodes=nodes, pods=pods, groups=[p3], now=T0, causes=causes())
    assert accrual.rates == {"p3": pytest.approx(36.0)}
    assert caused(accrual) == {"p3": {"vision": 12.0}}
    # a longer idle threshold keeps n2 warm for research as well
    longer = costs.attribute_overhead(
        nodes=nodes, pods=pods, groups=[p3], now=T0, causes=causes(idle_threshold=timedelta(minutes=15))
    )
    assert caused(longer) == {"p3": {"research": 12.0, "vision": 12.0}}


def test_a_node_that_empties_is_kept_warm_for_the_team_that_last_held_it_as_the_process_remembers() -> None:
    p3 = group()
    memory = costs.OverheadMemory()
    remembering = costs.OverheadCauses(team_of=lambda: TEAMS, demand=[], memory=memory)
    nodes = [node("n1", of=p3), node("n2", of=p3)]

    def check(at: timedelta, pods: list[Pod], listed: list[Node] = nodes) -> dict[str, dict[str, float]]:
        accrual = costs.attribute_overhead(
            nodes=listed, pods=pods, groups=[p3], now=T0 + at, causes=remembering
        )
        return caused(accrual)

    # given research's job on n1 and vision's on half of n2
    assert (
        check(timedelta(0), [pod("a", on="n1", gpu=4, job="r-1"), pod("b", on="n2", gpu=2, job="v-1")]) == {}
    )
    # when both end (their objects deleted: no pod is left to say whose they were)
    assert check(timedelta(minutes=1), []) == {"p3": {"research": 12.0, "vision": 12.0}}
    # then each node stays its last holder's until the idle threshold has passed since it emptied
    assert check(timedelta(minutes=10, seconds=59), []) == {"p3": {"research": 12.0, "vision": 12.0}}
    assert check(timedelta(minutes=11), []) == {}
    assert memory.holders == {}
    # and a node no longer listed is forgotten
    check(timedelta(minutes=12), [pod("c", on="n1", gpu=4, job="s-1")])
    check(timedelta(minutes=13), [], listed=nodes[1:])
    assert memory.holders == {}


def test_a_check_that_plans_nothing_new_on_the_same_fleet_repeats_the_last_accrual_until_the_time_moves_it() -> (
    None
):
    # given an instance booting for research since 5 minutes before T0 (it counts so until T0+5m)
    p3 = group(instances=booting(timedelta(minutes=5)))
    nodes: list[Node] = []
    pods: list[Pod] = []
    memory = costs.OverheadMemory()
    first = costs.attribute_overhead(
        nodes=nodes, pods=pods, groups=[p3], now=T0,
        causes=costs.OverheadCauses(team_of=lambda: TEAMS, demand=[waiting("r-1-0", job="r-1", gpu=4)], memory=memory),
    )  # fmt: skip
    assert caused(first) == {"p3": {"research": 12.0}}
    quiet = costs.OverheadCauses(team_of=lambda: TEAMS, memory=memory)

    def again(at: timedelta, last: FleetAccrual) -> FleetAccrual:
        return costs.attribute_overhead(
            nodes=nodes, pods=pods, groups=[p3], now=T0 + at, causes=quiet, last=last
        )

    # when quiet checks see the very same objects: the same accrual, not made again
    second = again(timedelta(minutes=2), first)
    assert second.at == T0 + timedelta(minutes=2) and second.rates is first.rates
    assert caused(second) == {"p3": {"research": 12.0}}
    # and a ledger that holds another accrual than this process's last has it made again
    assert again(timedelta(minutes=3), first).rates is not first.rates
    # then once the instance passes the provision timeout, it is made again: nobody's now
    later = again(timedelta(minutes=5), memory.accrual or first)
    assert later.caused == {} and later.rates == {"p3": pytest.approx(12.0)}


def test_an_empty_node_kept_warm_for_no_one_is_there_for_the_pods_waiting_for_room() -> None:
    p3 = group()
    # a Ready node no job has held (just arrived, or idle long): research's job will start on it
    accrual = costs.attribute_overhead(
        nodes=[node("n1", of=p3)], pods=[], groups=[p3], now=T0,
        causes=causes([waiting("r-1-0", job="r-1", gpu=2)]),
    )  # fmt: skip
    assert caused(accrual) == {"p3": {"research": 12.0}}
    # with nothing waiting it is nobody's
    idle = costs.attribute_overhead(
        nodes=[node("n1", of=p3)], pods=[], groups=[p3], now=T0, causes=causes([])
    )
    assert idle.caused == {} and idle.rates == {"p3": 12.0}


def test_a_check_that_plans_nothing_new_keeps_the_last_buyers_and_no_causes_attribute_nothing() -> None:
    p3 = group(instances=booting(timedelta(minutes=1)))
    last = FleetAccrual(at=T0 - timedelta(minutes=1), rates={"p3": 12.0}, buyers={"p3": {"speech": 2.0}})
    quiet = costs.attribute_overhead(nodes=[], pods=[], groups=[p3], now=T0, causes=causes(None), last=last)
    assert caused(quiet) == {"p3": {"speech": 12.0}} and quiet.buyers == {"p3": {"speech": 2.0}}
    blind = costs.attribute_overhead(nodes=[], pods=[], groups=[p3], now=T0, causes=None, last=last)
    assert blind.caused == {} and blind.buyers == {} and blind.rates == {"p3": pytest.approx(12.0)}


def test_teams_are_asked_for_only_when_a_team_is_wanted() -> None:
    asked: list[int] = []

    def team_of() -> dict[str, str]:
        asked.append(1)
        return TEAMS

    p3 = group()
    nodes, busy = [node("n1", of=p3)], [pod("a", on="n1", gpu=4, job="r-1")]
    demand = [waiting("r-2-0", job="r-2", gpu=4)]
    # no memory of holders, the fleet busy: no team is wanted
    blind = costs.OverheadCauses(team_of=team_of, demand=demand)
    accrual = costs.attribute_overhead(nodes=nodes, pods=busy, groups=[p3], now=T0, causes=blind)
    assert accrual.caused == {} and asked == []
    # with a memory: the holder of a node is looked up when it is new to it, and only then
    memory = costs.OverheadMemory()
    remembering = costs.OverheadCauses(team_of=team_of, demand=demand, memory=memory)
    for minute in range(3):
        at = T0 + timedelta(minutes=minute)
        costs.attribute_overhead(nodes=nodes, pods=busy, groups=[p3], now=at, causes=remembering)
    assert asked == [1] and memory.holders == {"n1": costs.Holder("r-1", "research")}


def test_at_most_so_many_teams_per_group_are_named_the_rest_is_unattributed() -> None:
    many = {f"j-{n}": f"team-{n:02d}" for n in range(costs.MAX_TEAMS_PER_GROUP + 5)}
    p3 = group(instances=booting(timedelta(minutes=1)))
    demand = [waiting(f"p-{n}", job=job_id, gpu=1 + (n % 2)) for n, job_id in enumerate(many)]
    accrual = costs.attribute_overhead(
        nodes=[], pods=[], groups=[p3], now=T0,
        causes=costs.OverheadCauses(team_of=lambda: many, demand=demand),
    )  # fmt: skip
    named = accrual.caused["p3"]
    assert len(named) == costs.MAX_TEAMS_PER_GROUP
    assert all(many[f"j-{n}"] in named for n in range(1, 25, 2)), "those that asked the most are named"
    assert sum(named.values()) < 12.0
    assert len(accrual.buyers["p3"]) == costs.MAX_TEAMS_PER_GROUP + 1  # and OTHERS


def test_overhead_between_never_charges_teams_more_than_the_groups_rate() -> None:
    last = FleetAccrual(at=T0, rates={"p3": 10.0}, caused={"p3": {"a": 6.0, "b": 6.0}})
    rows = costs.overhead_between(last, T0 + timedelta(hours=1))
    assert [(r.team, r.dollars) for r in rows] == [("a", 6.0), ("b", 4.0)]


# ---- a job's cost ------------------------------------------------------------


def test_a_run_starting_records_its_rate_and_keeps_earlier_runs_cost() -> None:
    rate = JobRate(dollars_per_hour=6.0, savings_per_hour=2.0)
    assert costs.started(job(), rate=rate) == {"cost_rate": 6.0, "cost": 0.0, "spot_savings": 0.0}
    assert costs.started(job(cost=4.5, spot_savings=1.0), rate=rate) == {
        "cost_rate": 6.0,
        "cost": 4.5,
        "spot_savings": 1.0,
    }
    assert costs.started(job(), rate=None) == {"cost_rate": None, "cost": None, "spot_savings": None}


def test_a_run_stopping_keeps_what_it_cost_and_a_requeued_run_keeps_its_time() -> None:
    running = job(cost=1.0, cost_rate=6.0, spot_savings=0.0, ran_seconds=600.0)
    start = T0 - timedelta(minutes=30)
    ended = costs.stopped(running, run_start=start, end=T0, requeued=False, savings_ratio=0.5)
    assert ended == {"cost": 4.0, "spot_savings": 1.5, "cost_rate": None}
    requeued = costs.stopped(running, run_start=start, end=T0, requeued=True)
    assert requeued == {"cost": 4.0, "spot_savings": 0.0, "cost_rate": None, "ran_seconds": 2400.0}
    unpriced = costs.stopped(job(), run_start=start, end=T0, requeued=False)
    assert unpriced["cost"] is None


def test_a_finished_jobs_charge_is_its_cost_in_its_finish_month_with_all_its_gpu_hours() -> None:
    finished = job(
        status=JobStatus.SUCCEEDED,
        cost=9.0,
        spot_savings=3.0,
        ran_seconds=1800.0,
        finished_at=T0 + timedelta(hours=2),
    )
    charge = costs.charge(finished, run_start=T0)
    assert charge is not None
    assert (charge.team, charge.month, charge.dollars, charge.spot_savings) == (
        "research",
        "2026-04",
        9.0,
        3.0,
    )
    assert charge.gpu_hours == pytest.approx(2 * 2.5)
    assert costs.charge(job(status=JobStatus.FAILED, finished_at=T0), run_start=T0) is None


def test_a_running_jobs_month_to_date_counts_this_run_from_the_month_start_only() -> None:
    running = job(cost=2.0, cost_rate=6.0, started_at=T0 - timedelta(hours=5))
    now = T0 + timedelta(hours=3)  # 02:00 on April 1st
    assert costs.month_to_date_of_running(running, run_start=running.started_at, now=now) == pytest.approx(
        2.0 + 6.0 * 2
    )
    assert costs.month_to_date_of_running(job(cost=None), run_start=None, now=now) == 0.0


def test_cost_so_far_adds_this_run_at_its_rate_to_what_earlier_runs_cost() -> None:
    running = job(cost=1.5, cost_rate=6.0)
    assert costs.cost_so_far(running, now=T0, run_start=T0 - timedelta(minutes=20)) == pytest.approx(3.5)
    assert (
        costs.cost_so_far(job(status=JobStatus.SUCCEEDED, cost=9.0, cost_rate=None), now=T0, run_start=None)
        == 9.0
    )
    assert costs.cost_so_far(job(), now=T0, run_start=T0) is None


def test_the_current_run_of_a_requeued_job_starts_at_its_latest_move_to_running() -> None:
    first = job()
    assert costs.current_run_start(first, events=()) == first.started_at
    again = job(ran_seconds=600.0)
    events = [
        JobEvent(
            job_id="j-1",
            version=2,
            at=T0 - timedelta(hours=1),
            status=JobStatus.RUNNING,
            previous=JobStatus.QUEUED,
            reason="Started",
        ),
        JobEvent(
            job_id="j-1",
            version=3,
            at=T0 - timedelta(minutes=50),
            status=JobStatus.QUEUED,
            previous=JobStatus.RUNNING,
            reason="NodeLost",
        ),
        JobEvent(
            job_id="j-1",
            version=4,
            at=T0 - timedelta(minutes=30),
            status=JobStatus.RUNNING,
            previous=JobStatus.QUEUED,
            reason="Started",
        ),
        JobEvent(
            job_id="j-1",
            version=5,
            at=T0 - timedelta(minutes=10),
            status=JobStatus.RUNNING,
            previous=JobStatus.RUNNING,
            reason="NodeLost",
        ),
    ]
    assert costs.current_run_start(again, events) == T0 - timedelta(minutes=30)


def test_months_and_durations() -> None:
    assert costs.month_key(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == "2026-12"
    assert costs.next_month_start(datetime(2026, 12, 5, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert costs.since_duration(T0, "30d") == T0 - timedelta(days=30)
    with pytest.raises(ValueError, match="such as 30d"):
        costs.since_duration(T0, "30x")
    # a duration longer than the calendar is all of it; digits that are not ASCII are no number
    assert costs.since_duration(T0, "99999999999d") == datetime.min.replace(tzinfo=UTC)
    assert costs.month_key(datetime.min.replace(tzinfo=UTC)) == "0001-01"  # before every month kept
    assert costs.since_duration(T0, "999999999999w") == datetime.min.replace(tzinfo=UTC)
    for text in ("\u0663d", "\u00b2d", "1" * 13 + "d", "d"):
        with pytest.raises(ValueError, match="such as 30d"):
            costs.since_duration(T0, text)
