"""What admission reads of the running jobs, kept between checks, against a look at every replica Job."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from squall.core.manifests import admission_patch
from squall.planner.admission import AdmissionCache, ReplicaJob, TeamShare, admit
from squall.planner.kube import replica_job_cache
from squall.planner.model import Pod
from squall.planner.planning import rooms_on_nodes_up

from .builders import NOW, POLICY, node_of, pod
from .test_admission import _decision, admission_patch_applied, job_objects, p4d


def _every_replica(jobs: list[ReplicaJob], pods: list[Pod]) -> tuple[dict[str, int], list[str], list[str]]:
    """GPUs in use by team, the half-done admissions, and the replica Jobs without a pod, read one by one."""
    by_job: dict[str, list[ReplicaJob]] = {}
    for job in jobs:
        by_job.setdefault(job.job_id, []).append(job)
    with_pods = {(p.namespace, p.name.rsplit("-", 1)[0]) for p in pods if p.job_id is not None}
    in_use: dict[str, int] = {}
    resumed, not_created = [], []
    for job_id, replicas in sorted(by_job.items()):
        replicas.sort(key=lambda r: r.name)
        region = next((r.admitted_region for r in replicas if r.admitted_region), None)
        if all(r.suspended for r in replicas) and region is None:
            continue  # queued, incomplete or finished: not running
        if region is not None and any(r.suspended for r in replicas):
            resumed.append(job_id)
        for replica in replicas:
            # let go, or of a job placed in a site (its objects on their way): in use
            if not replica.finished and (not replica.suspended or region is not None):
                in_use[replica.team] = in_use.get(replica.team, 0) + replica.gpus
            if replica.finished or (replica.namespace, replica.name) in with_pods:
                continue
            if not replica.suspended or region is not None:
                not_created.append(replica.name)
    return in_use, resumed, not_created


@pytest.mark.parametrize("seed", range(4))
def test_the_running_jobs_kept_between_checks_read_as_every_replica_job_does(seed: int) -> None:
    rng = random.Random(seed)
    groups = [p4d(nodes=2), p4d("p4d-use1", "us-east-1", nodes=1)]
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    teams = {"research": TeamShare(quota=64), "vision": TeamShare(weight=2.0)}
    live: dict[str, list[dict[str, Any]]] = {}
    versions = itertools.count(1)

    def stamp(obj: dict[str, Any]) -> dict[str, Any]:
        """A new resourceVersion (and a uid, the first time)."""
        uid = {"uid": f"uid-{obj['metadata']['name']}"}
        return {**obj, "metadata": uid | obj["metadata"] | {"resourceVersion": str(next(versions))}}

    parsed, cache = replica_job_cache(), AdmissionCache()
    for step in range(30):
        for _ in range(rng.randint(0, 3)):
            job_id = f"j{step:02d}{rng.randint(0, 999):03d}"
            objects = job_objects(
                job_id,
                team=rng.choice(["research", "vision"]),
                gpus=rng.choice([1, 4, 8]),
                replicas=rng.choice([1, 2, 4]),
                minute=step,
            )
            live[job_id] = [stamp(o) for o in objects]
        for job_id in rng.sample(sorted(live), k=min(len(live), rng.randint(0, 4))):
            roll = rng.random()
            if roll < 0.2:
                del live[job_id]
            elif roll < 0.7:  # let go, whole or in part
                objects = live[job_id]
                let_go = objects if rng.random() < 0.7 else objects[:1]
                region = rng.choice(["us-west-2", "us-east-1"])
                live[job_id] = [
                    stamp(admission_patch_applied(o, admission_patch(o, region=region))) if o in let_go else o
                    for o in objects
                ]
            else:
                live[job_id] = [stamp(o) for o in live[job_id]]
        listed = [o for objects in live.values() for o in objects]
        rng.shuffle(listed)
        jobs = [j for j in parsed.parse_all(listed) if j]
        # Pods for some of the replica Jobs let go: those are created, the others not yet.
        pods = [
            pod(f"{j.name}-x{rng.randint(0, 9)}", gpu=j.gpus, job=j.job_id, namespace=j.namespace)
            for j in jobs
            if not j.suspended and rng.random() < 0.6
        ]

        decided = admit(
            jobs=jobs, nodes=nodes, pods=pods, groups=groups, teams=teams, policy=POLICY, now=NOW, cache=cache
        )

        in_use, resumed, not_created = _every_replica(jobs, pods)
        newly = {a.job_id: a.gpus for a in decided.admitted if not a.resumed}
        teams_of = {j.job_id: j.team for j in jobs}
        for job_id, gpus in newly.items():
            in_use[teams_of[job_id]] = in_use.get(teams_of[job_id], 0) + gpus
        assert dict(decided.in_use) == in_use, f"step {step}"
        assert [a.job_id for a in decided.admitted if a.resumed] == resumed, f"step {step}"
        assert [p.name for p in decided.demand[: len(not_created)]] == not_created, f"step {step}"
        afresh = admit(jobs=jobs, nodes=nodes, pods=pods, groups=groups, teams=teams, policy=POLICY, now=NOW)
        assert _decision(decided) == _decision(afresh), f"step {step}"


def test_only_rooms_with_the_least_asked_for_free_are_made_when_asked() -> None:
    from squall.planner.inventory import build_inventory

    groups = [p4d(nodes=3)]
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    pods = [pod("full-0", gpu=8, node=nodes[0].name), pod("half-0", gpu=4, node=nodes[1].name)]
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=POLICY, now=NOW)

    every = rooms_on_nodes_up(inventory)
    some = rooms_on_nodes_up(inventory, least=(1000, 2**30, 5, 1))

    assert [r.name for r in every] == [n.name for n in nodes]
    assert [r.name for r in some] == [nodes[2].name]  # the full node and the one with 4 GPUs left are not


def test_admission_packs_the_same_without_rooms_too_small_for_any_job() -> None:
    groups = [p4d(nodes=3), p4d("p4d-use1", "us-east-1", nodes=2)]
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    pods = [pod(f"busy-{i}", gpu=8 - i, job=f"busy{i}", node=n.name) for i, n in enumerate(nodes)]
    jobs = [
        j
        for j in replica_job_cache().parse_all(
            [o for i in range(6) for o in job_objects(f"q{i}", gpus=2 + i % 3, minute=i)]
        )
        if j
    ]

    decided = admit(jobs=jobs, nodes=nodes, pods=pods, groups=groups, teams={}, policy=POLICY, now=NOW)

    # Free GPUs: 0, 1 and 2 in us-west-2, 3 and 4 in us-east-1 (first in the regions'
    # order); jobs of 2, 3, 4, 2, 3, 4 GPUs. The full node and the one with 1 GPU left
    # are too small for the least job: packed without them, the decision is the same.
    assert {a.job_id: a.region for a in decided.admitted} == {
        "q0": "us-east-1",
        "q1": "us-east-1",
        "q3": "us-west-2",
    }
    assert [w.job_id for w in decided.waiting] == ["q2", "q4", "q5"]
