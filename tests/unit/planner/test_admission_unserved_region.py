"""A job held to regions no node group is in says so, not that it is too large. Pure.

A spec's placement.regions is checked for its shape only (intake does not know the
groups): a region no group serves left the job QUEUED with "larger than the node
groups at max size", which sent its owner shrinking a job that could never run there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from squall.core.manifests import render
from squall.core.spec import JobSpec
from squall.planner.admission import AdmissionPlan, admit
from squall.planner.kube import parse_replica_jobs
from squall.planner.model import NodeGroup

from .builders import NOW, POLICY, node_of
from .test_admission import p4d


def jobs_of(
    job_id: str, *, regions: list[str] | None = None, gpus: int = 1, workers: int = 1
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "name": "train",
        "team": "research",
        "image": "reg.example.com/tf:1",
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
    }
    if regions is not None:
        body["placement"] = {"regions": regions}
    if workers > 1:
        body["replicas"] = {"worker": workers}
    objects = render(
        JobSpec.model_validate(body),
        job_id=job_id,
        namespace="team-research",
        submitted_at=NOW - timedelta(hours=1),
    )
    return [o for o in objects if o["kind"] == "Job"]


def run(jobs: list[dict[str, Any]], groups: list[NodeGroup]) -> AdmissionPlan:
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    return admit(
        jobs=parse_replica_jobs(jobs), nodes=nodes, pods=[], groups=groups, teams={}, policy=POLICY, now=NOW
    )


GROUPS = [
    p4d("gpu-usw2", "us-west-2", nodes=1, max_size=4),
    p4d("gpu-use1", "us-east-1", nodes=1, max_size=4),
]


def test_a_job_held_to_a_region_no_group_is_in_says_so() -> None:
    [waiting] = run(jobs_of("lost", regions=["eu-west-9"]), GROUPS).waiting
    assert waiting.never_fits
    assert "no node group is in eu-west-9 (the groups are in us-east-1, us-west-2)" in waiting.message
    assert "larger than the node groups" not in waiting.message
    assert "no node group is in eu-west-9" in waiting.entry()["message"]


def test_every_asked_region_is_named_when_none_has_a_group() -> None:
    [waiting] = run(jobs_of("lost", regions=["eu-west-9", "ap-south-7"], workers=2), GROUPS).waiting
    assert "no node group is in ap-south-7, eu-west-9" in waiting.message


def test_a_job_too_large_where_groups_are_is_still_too_large() -> None:
    # us-west-2 has a group, but its max size holds 4 nodes of 8 GPUs: 5 x 8 never fits
    [waiting] = run(jobs_of("huge", regions=["us-west-2"], gpus=8, workers=5), GROUPS).waiting
    assert waiting.never_fits and "larger than the node groups at max size" in waiting.message
    assert waiting.unserved_regions == ()


def test_one_served_region_among_those_asked_is_enough_to_run() -> None:
    result = run(jobs_of("ok", regions=["eu-west-9", "us-east-1"]), GROUPS)
    assert [(a.job_id, a.region) for a in result.admitted] == [("ok", "us-east-1")]


def test_a_job_anywhere_is_not_held_by_region() -> None:
    result = run(jobs_of("anywhere"), GROUPS)
    assert [a.job_id for a in result.admitted] == ["anywhere"]
