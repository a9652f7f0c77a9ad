"""Admission: whole gangs on ready room in one region, by priority, fair share and quota. Pure."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from squall.core.manifests import admission_patch, render
from squall.core.spec import JobSpec
from squall.planner.admission import AdmissionPlan, TeamShare, admit
from squall.planner.kube import parse_replica_jobs
from squall.planner.model import REGION_LABEL, NodeGroup, Pod, Policy
from squall.planner.planning import plan

from .builders import NOW, POLICY, group, instance, node_of, pod, resources


def p4d(name: str = "p4d-usw2", region: str = "us-west-2", *, nodes: int = 0, max_size: int = 8) -> NodeGroup:
    return group(
        name,
        region=region,
        allocatable=resources("95", "1100Gi", 8, 110),
        instances=[instance(f"i-{name}-{i}") for i in range(nodes)],
        max_size=max_size,
    )


def job_objects(
    job_id: str,
    *,
    team: str = "research",
    gpus: int = 8,
    replicas: int = 1,
    priority: int = 50,
    minute: int = 0,
    requeued: bool = False,
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "name": "train",
        "team": team,
        "image": "reg.example.com/tf:1",
        "priority": priority,
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
    }
    if replicas > 1:
        body["replicas"] = {"worker": replicas}
    objects = render(
        JobSpec.model_validate(body),
        job_id=job_id,
        namespace=f"team-{team}",
        submitted_at=NOW - timedelta(hours=1) + timedelta(minutes=minute),
        requeued=requeued,
    )
    return [o for o in objects if o["kind"] == "Job"]


def run(
    jobs: list[dict[str, Any]],
    *,
    groups: list[NodeGroup],
    pods: list[Pod] = (),  # type: ignore[assignment]
    teams: dict[str, TeamShare] | None = None,
    policy: Policy = POLICY,
) -> AdmissionPlan:
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    return admit(
        jobs=parse_replica_jobs(jobs),
        nodes=nodes,
        pods=list(pods),
        groups=groups,
        teams=teams or {},
        policy=policy,
        now=NOW,
    )


def admitted(result: AdmissionPlan) -> dict[str, str]:
    return {a.job_id: a.region for a in result.admitted}


def test_a_job_that_fits_on_ready_room_is_admitted_and_one_that_does_not_waits_first_in_line() -> None:
    groups = [p4d(nodes=1)]
    result = run(job_objects("a") + job_objects("b", minute=1), groups=groups)
    assert admitted(result) == {"a": "us-west-2"}
    [waiting] = result.waiting
    assert (waiting.job_id, waiting.position, waiting.team_position, waiting.reason) == ("b", 1, 1, "Queued")
    # The planner is asked for what waits: b's pod, so that a node is bought for it.
    assert [p.job_id for p in result.demand if p.job_id == "b"] == ["b"]


def test_nothing_is_admitted_on_booting_nodes_only() -> None:
    booting = group("g", instances=[instance("i-1", launched=NOW - timedelta(minutes=1))])
    # The instance has not registered as a node yet: no ready room.
    result = admit(
        jobs=parse_replica_jobs(job_objects("a", gpus=1)),
        nodes=[],
        pods=[],
        groups=[booting],
        teams={},
        policy=POLICY,
        now=NOW,
    )
    assert admitted(result) == {}
    assert result.waiting[0].job_id == "a"


def test_a_gang_is_admitted_whole_in_one_region_or_not_at_all() -> None:
    # 2 nodes in us-west-2, 1 in us-east-1: a 3-replica gang of 8 GPUs fits in neither region.
    west, east = p4d(nodes=2), p4d("p4d-use1", "us-east-1", nodes=1)
    result = run(job_objects("gang", replicas=3), groups=[west, east])
    assert admitted(result) == {}
    # A 2-replica gang fits in us-west-2 only, and goes there whole.
    result = run(job_objects("pair", replicas=2), groups=[west, east])
    assert admitted(result) == {"pair": "us-west-2"}
    assert len(result.admitted[0].jobs) == 2


def test_higher_priority_overtakes_an_earlier_low_priority_burst() -> None:
    groups = [p4d(nodes=1)]
    burst = [o for i in range(5) for o in job_objects(f"low-{i}", priority=10, minute=i)]
    urgent = job_objects("urgent", priority=90, minute=30)
    result = run(burst + urgent, groups=groups)
    assert admitted(result) == {"urgent": "us-west-2"}
    assert [w.job_id for w in result.waiting] == [f"low-{i}" for i in range(5)]


def test_fair_share_interleaves_teams_by_weight_within_a_priority() -> None:
    groups = [p4d(nodes=0)]
    jobs = [o for i in range(4) for o in job_objects(f"r{i}", team="research", minute=i)]
    jobs += [o for i in range(4) for o in job_objects(f"v{i}", team="vision", minute=10 + i)]
    result = run(jobs, groups=groups, teams={"research": TeamShare(weight=1), "vision": TeamShare(weight=3)})
    order = [w.job_id for w in result.waiting]
    # vision weighs three times research: three of its jobs for each of research's.
    # (a tie goes to the team named first)
    assert order[:5] == ["r0", "v0", "v1", "v2", "r1"]
    assert [w.team_position for w in result.waiting if w.team == "vision"] == [1, 2, 3, 4]


def test_a_team_at_its_quota_waits_with_quota_exceeded_while_another_team_uses_the_rest() -> None:
    groups = [p4d(nodes=4)]
    jobs = [o for i in range(3) for o in job_objects(f"r{i}", team="research", minute=i)]
    jobs += [o for i in range(3) for o in job_objects(f"v{i}", team="vision", minute=10 + i)]
    result = run(jobs, groups=groups, teams={"research": TeamShare(quota=8)})
    assert set(admitted(result)) == {"r0", "v0", "v1", "v2"}
    held = [w for w in result.waiting if w.held_back]
    assert [w.job_id for w in held] == ["r1", "r2"]
    assert held[0].reason == "QuotaExceeded:8/8 GPUs"
    assert held[0].position == 0
    # Never bought for: no demand for what the quota holds back.
    assert not [p for p in result.demand if p.job_id in ("r1", "r2")]
    assert result.in_use == {"research": 8, "vision": 24}


def test_quota_counts_what_the_team_already_runs() -> None:
    groups = [p4d(nodes=2)]
    running = job_objects("r-old", team="research")
    for obj in running:
        obj.update(_patched(obj, "us-west-2"))
    result = run(
        running + job_objects("r-new", team="research", minute=5),
        groups=groups,
        teams={"research": TeamShare(quota=8)},
    )
    assert admitted(result) == {}
    assert result.waiting[0].reason == "QuotaExceeded:8/8 GPUs"


def test_a_waiting_head_keeps_the_room_it_can_use_so_smaller_jobs_behind_cannot_take_it() -> None:
    # 2 ready nodes; the head needs 3 nodes. A 1-GPU job behind it must not take the
    # room the head will need once a third node is bought.
    groups = [p4d(nodes=2)]
    jobs = job_objects("head", replicas=3, minute=0) + job_objects("small", gpus=1, minute=5)
    result = run(jobs, groups=groups)
    assert admitted(result) == {}
    assert result.waiting[0].reserved_region == "us-west-2"
    # Room the head cannot use (another region) is backfilled.
    east = p4d("p4d-use1", "us-east-1", nodes=1)
    result = run(jobs, groups=[*groups, east])
    assert admitted(result) == {"small": "us-east-1"}


def test_a_job_no_region_can_ever_hold_reserves_nothing_and_holds_nobody_up() -> None:
    groups = [p4d(nodes=2, max_size=2)]
    jobs = job_objects("huge", replicas=4) + job_objects("small", gpus=1, minute=5)
    result = run(jobs, groups=groups)
    assert admitted(result) == {"small": "us-west-2"}
    [huge] = result.waiting
    assert "no region can ever hold it" in huge.message
    assert not [p for p in result.demand if p.job_id == "huge"]


def test_a_job_behind_more_gpu_jobs_than_the_gpu_groups_hold_is_still_bought_for_on_its_own_groups() -> None:
    # The GPU group holds two of the 8-GPU jobs at its max size; the CPU job behind
    # the other three fits none of its nodes, and the CPU group has room to grow.
    cpu = group("c5-usw2", gpu=False, max_size=4)
    groups = [p4d(max_size=2), cpu]
    jobs = [o for i in range(5) for o in job_objects(f"gpu-{i}", minute=i)]
    jobs += job_objects("cpu-job", gpus=0, minute=10)
    result = run(jobs, groups=groups)
    # Never more GPU jobs than the GPU groups could hold; the CPU job all the same.
    assert sorted({p.job_id for p in result.demand}) == ["cpu-job", "gpu-0", "gpu-1"]
    decided = plan(nodes=[], pods=list(result.demand), groups=groups, health={}, policy=POLICY, now=NOW)
    assert {s.group: s.to_desired for s in decided.scale_ups} == {"p4d-usw2": 2, "c5-usw2": 1}


def test_jobs_of_other_shapes_are_bought_for_up_to_what_their_groups_hold() -> None:
    # 1-GPU jobs fit both groups, 4-GPU jobs only the p3.8xlarge-like one: each kind
    # is bought for up to what the groups it fits could hold, whatever the other asks.
    p3 = group("p3-usw2", allocatable=resources("31", "240Gi", 4, 58), max_size=2)
    small = group("g5-usw2", allocatable=resources("7", "30Gi", 1, 58), max_size=4)
    jobs = [o for i in range(6) for o in job_objects(f"four-{i}", gpus=4, minute=i)]
    jobs += [o for i in range(20) for o in job_objects(f"one-{i}", gpus=1, minute=10 + i)]
    result = run(jobs, groups=[p3, small], policy=dataclasses.replace(POLICY, backfill=False))
    demanded = {p.job_id for p in result.demand}
    assert sorted(j for j in demanded if j.startswith("four")) == ["four-0", "four-1"]
    # 1-GPU jobs: the 8 + 4 GPUs both groups could hold.
    assert len([j for j in demanded if j.startswith("one")]) == 12


def test_with_backfill_only_jobs_that_start_once_the_nodes_boot_are_bought_for() -> None:
    # As above, with the time profile: the 4-GPU jobs ahead are booked on the two p3 nodes
    # for their declared run time, so the 1-GPU jobs are bought the four g5 nodes only
    # (more p3 room would wait for the 4-GPU jobs ahead to end, idle meanwhile).
    p3 = group("p3-usw2", allocatable=resources("31", "240Gi", 4, 58), max_size=2)
    small = group("g5-usw2", allocatable=resources("7", "30Gi", 1, 58), max_size=4)
    jobs = [o for i in range(6) for o in job_objects(f"four-{i}", gpus=4, minute=i)]
    jobs += [o for i in range(20) for o in job_objects(f"one-{i}", gpus=1, minute=10 + i)]
    result = run(jobs, groups=[p3, small])
    demanded = {p.job_id for p in result.demand}
    assert sorted(demanded) == ["four-0", "four-1", "one-0", "one-1", "one-2", "one-3"]
    starts = {w.job_id: w.starts_by for w in result.waiting}
    assert starts["four-0"] == starts["one-3"] == NOW + timedelta(minutes=5)  # a boot away
    assert starts["four-2"] == NOW + timedelta(minutes=5, hours=24)  # after four-0's declared day


def test_room_free_on_nodes_a_kind_of_job_cannot_use_buys_it_nothing() -> None:
    # Two idle GPU nodes with room to spare; the CPU jobs cannot use them (the GPU
    # taint), and their own group holds two of them (28Gi, 16Gi and 4 CPU each).
    groups = [p4d(nodes=2), group("c5-usw2", gpu=False, max_size=1)]
    jobs = [o for i in range(10) for o in job_objects(f"cpu-{i}", gpus=0, minute=i)]
    result = run(jobs, groups=groups, policy=dataclasses.replace(POLICY, backfill=False))
    assert sorted({p.job_id for p in result.demand}) == ["cpu-0", "cpu-1"]
    # With the time profile, exactly: the one c5 node it may have holds one of them (16 of its 28Gi).
    result = run(jobs, groups=groups)
    assert sorted({p.job_id for p in result.demand}) == ["cpu-0"]


def test_a_pod_at_another_priority_is_the_same_pod_but_for_its_priority() -> None:
    [replica] = parse_replica_jobs(job_objects("one", gpus=2))
    original = dataclasses.replace(
        replica.pod, node_name=None, finished_at=NOW, node_selector={"a": "b"}, deleting=True
    )
    moved = original.with_priority(4321)
    assert moved == dataclasses.replace(original, priority=4321)
    assert original.priority != 4321 and moved is not original


def test_pods_of_admitted_jobs_take_their_room_before_the_queue() -> None:
    groups = [p4d(nodes=1)]
    # Admitted a moment ago: its pod does not exist yet, but its room is taken.
    earlier = job_objects("earlier")
    for obj in earlier:
        obj.update(_patched(obj, "us-west-2"))
    result = run(earlier + job_objects("next", minute=5), groups=groups)
    assert admitted(result) == {}
    assert result.waiting[0].job_id == "next"
    # The planner sees the admitted job's pod pinned to its region.
    [pinned] = [p for p in result.demand if p.job_id == "earlier"]
    terms = pinned.required_affinity
    assert any(
        r.key == REGION_LABEL and r.values == ("us-west-2",) for t in terms for r in t.match_expressions
    )


def test_a_running_pod_uses_its_room() -> None:
    groups = [p4d(nodes=1)]
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    busy = pod("other-0", gpu=8, node=nodes[0].name)
    result = run(job_objects("a"), groups=groups, pods=[busy])
    assert admitted(result) == {}


def test_an_admission_left_half_done_is_finished_in_the_same_region() -> None:
    groups = [p4d(nodes=0)]
    objects = job_objects("gang", replicas=2)
    objects[0].update(_patched(objects[0], "us-east-1"))  # the first replica was let go, the second not
    result = run(objects, groups=groups)
    [finish] = result.admitted
    assert (finish.job_id, finish.region, finish.resumed) == ("gang", "us-east-1", True)
    assert [j.name for j in finish.jobs] == [objects[1]["metadata"]["name"]]


def test_a_requeued_job_goes_first_within_its_priority() -> None:
    groups = [p4d(nodes=0)]
    jobs = job_objects("first", minute=0) + job_objects("back", minute=30, requeued=True)
    result = run(jobs, groups=groups)
    assert [w.job_id for w in result.waiting] == ["back", "first"]


def test_a_job_whose_replicas_are_not_all_created_yet_waits() -> None:
    groups = [p4d(nodes=4)]
    objects = job_objects("gang", replicas=3)
    result = run(objects[:2], groups=groups)
    assert admitted(result) == {}
    assert result.incomplete == ("gang",)


def test_the_decision_record_shape_is_bounded() -> None:
    groups = [p4d(nodes=0)]
    jobs = [o for i in range(30) for o in job_objects(f"j{i}", minute=i)]
    shown = run(jobs, groups=groups).to_dict(most=10)
    assert len(shown["waiting"]) == 10  # type: ignore[arg-type]
    assert shown["waitingTotal"] == 30


def _patched(obj: dict[str, Any], region: str) -> dict[str, Any]:
    """The Job as admission's patch leaves it (merge patch applied by hand)."""
    patch = admission_patch(obj, region=region)
    merged = dict(obj)
    merged["metadata"] = {
        **obj["metadata"],
        "annotations": {**obj["metadata"]["annotations"], **patch["metadata"]["annotations"]},
    }
    spec = dict(obj["spec"], suspend=False)
    template = dict(spec["template"])
    template["spec"] = {**template["spec"], **patch["spec"].get("template", {}).get("spec", {})}
    spec["template"] = template
    merged["spec"] = spec
    return merged


def test_a_long_queue_is_described_head_first_and_counted_whole() -> None:
    from squall.planner.admission import MAX_LISTED

    groups = [p4d(nodes=1, max_size=1)]
    jobs = [o for i in range(MAX_LISTED + 300) for o in job_objects(f"j{i:05d}", gpus=1, minute=i)]
    result = run(jobs, groups=groups)
    assert len(result.admitted) == 8  # one node of 8 GPUs
    assert len(result.waiting) == MAX_LISTED
    assert [w.position for w in result.waiting[:3]] == [1, 2, 3]
    assert result.waiting[0].job_id == "j00008"
    assert result.queued == {"research": (MAX_LISTED + 292, MAX_LISTED + 292)}
    assert result.to_dict()["waitingTotal"] == MAX_LISTED + 292


def test_the_same_cache_gives_the_same_decision() -> None:
    from squall.planner.admission import AdmissionCache
    from squall.planner.kube import replica_job_cache

    groups = [p4d(nodes=2)]
    objects = [o for i in range(6) for o in job_objects(f"j{i}", gpus=4, minute=i)]
    for obj in objects:
        obj["metadata"] |= {"uid": obj["metadata"]["name"], "resourceVersion": "1"}
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    parsed, cache = replica_job_cache(), AdmissionCache()
    decisions = []
    for _ in range(3):
        jobs = [j for j in parsed.parse_all(objects) if j]
        decided = admit(jobs=jobs, nodes=nodes, pods=[], groups=groups, teams={}, policy=POLICY, now=NOW, cache=cache)
        decisions.append((admitted(decided), [(w.job_id, w.position) for w in decided.waiting]))
    assert decisions[0] == decisions[1] == decisions[2]
    assert len(cache.jobs) == 6


def _decision(result: AdmissionPlan) -> tuple[object, ...]:
    return (
        [(a.job_id, a.region, a.gpus, [j.name for j in a.jobs], a.resumed) for a in result.admitted],
        [(w.job_id, w.position, w.team_position, w.reason, w.message) for w in result.waiting],
        sorted((p.namespace, p.name, p.priority) for p in result.demand),
        result.in_use,
        result.incomplete,
        result.queued,
    )


@pytest.mark.parametrize("seed", range(6))
def test_a_queue_kept_up_to_date_between_checks_decides_as_one_read_afresh(seed: int) -> None:
    """The cache follows the queue by the replica Jobs that came and went; any drift shows here."""
    import random

    from squall.planner.admission import AdmissionCache
    from squall.planner.kube import replica_job_cache

    rng = random.Random(seed)
    groups = [p4d(nodes=2), p4d("p4d-use1", "us-east-1", nodes=1)]
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    teams = {"research": TeamShare(quota=24, weight=2.0), "vision": TeamShare(weight=1.0)}
    live: dict[str, list[dict[str, Any]]] = {}
    version = 0

    def stamp(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal version
        version += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        return obj

    parsed, cache = replica_job_cache(), AdmissionCache()
    for step in range(40):
        for _ in range(rng.randint(0, 4)):  # arrivals
            job_id = f"j{step:02d}{rng.randint(0, 999):03d}"
            objects = job_objects(
                job_id,
                team=rng.choice(["research", "vision"]),
                gpus=rng.choice([1, 4, 8]),
                replicas=rng.choice([1, 1, 2, 4]),
                priority=rng.choice([10, 50, 90]),
                minute=step,
                requeued=rng.random() < 0.1,
            )
            if rng.random() < 0.1:
                objects = objects[:-1] or objects  # a replica Job not created yet
            live[job_id] = [stamp(o) for o in objects]
        for job_id in rng.sample(sorted(live), k=min(len(live), rng.randint(0, 3))):
            roll = rng.random()
            if roll < 0.3:
                del live[job_id]  # finished and cleaned up, or cancelled
            elif roll < 0.6:  # admitted (in part, at times)
                objects = live[job_id]
                let_go = objects if rng.random() < 0.8 else objects[:1]
                live[job_id] = [
                    stamp(admission_patch_applied(o, admission_patch(o, region="us-west-2"))) if o in let_go else o
                    for o in objects
                ]
            else:  # a status change: a new version of the same Job
                live[job_id] = [stamp(o) for o in live[job_id]]
        listed = [o for objects in live.values() for o in objects]
        rng.shuffle(listed)
        jobs = [j for j in parsed.parse_all(listed) if j]
        kept = admit(jobs=jobs, nodes=nodes, pods=[], groups=groups, teams=teams, policy=POLICY, now=NOW, cache=cache)
        afresh = admit(jobs=jobs, nodes=nodes, pods=[], groups=groups, teams=teams, policy=POLICY, now=NOW)
        assert _decision(kept) == _decision(afresh), f"step {step}"


def admission_patch_applied(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch, on a copy."""
    merged = dict(obj)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = admission_patch_applied(merged[key], value)
        else:
            merged[key] = value
    return merged
