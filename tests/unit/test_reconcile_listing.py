"""Reconcile's lists kept between runs (services/reconcile.py `_Listing`): the same as one read afresh."""

from __future__ import annotations

import random
from typing import Any

import pytest

from squall.conventions import JOB_ID_LABEL
from squall.services.reconcile import _Listing


def _obj(job_id: str, name: str, version: int, *, suspended: bool = True, uid: bool = True) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a", "labels": {JOB_ID_LABEL: job_id}}
    if uid:
        metadata |= {"uid": f"uid-{name}", "resourceVersion": str(version)}
    return {"metadata": metadata, "spec": {"suspend": suspended}, "status": {}}


def _grouped(listing: _Listing) -> dict[str, list[str]]:
    return {job_id: [o["metadata"]["name"] for o in listing.of_job(job_id)] for job_id in listing.by_job}


@pytest.mark.parametrize("seed", range(5))
def test_a_listing_kept_between_runs_groups_as_one_read_afresh(seed: int) -> None:
    rng = random.Random(seed)
    live: dict[str, dict[str, Any]] = {}
    kept, version = _Listing(), 0
    before: list[tuple[str, str]] = []
    before_by_job: dict[str, list[tuple[str, str]]] = {}
    for step in range(60):
        for _ in range(rng.randint(0, 3)):
            version += 1
            job = f"j{rng.randint(0, 15)}"
            name = f"{job}-worker-{rng.randint(0, 3)}"
            live[name] = _obj(job, name, version, suspended=rng.random() < 0.5)
        for name in rng.sample(sorted(live), k=min(len(live), rng.randint(0, 2))):
            if rng.random() < 0.5:
                del live[name]
            else:  # changed: a new dict at a new version, as the API server hands it out
                version += 1
                old = live[name]
                live[name] = _obj(old["metadata"]["labels"][JOB_ID_LABEL], name, version, suspended=False)
        listed = list(live.values())
        if rng.random() < 0.3:  # a lister that hands out fresh copies of the same objects
            listed = [{**o, "metadata": dict(o["metadata"])} for o in listed]
        rng.shuffle(listed)
        generation = kept.generation
        changes = {f"j{i}": kept.changes_of(f"j{i}") for i in range(16)}
        kept.update(listed)
        afresh = _Listing()
        afresh.update(listed)
        assert _grouped(kept) == _grouped(afresh), f"step {step}"
        assert kept.stirring == afresh.stirring
        versions = sorted((o["metadata"]["uid"], o["metadata"]["resourceVersion"]) for o in listed)
        # the generation moves exactly when the objects (by uid and version) are not the last run's
        assert (kept.generation != generation) == (versions != before), f"step {step}"
        before = versions
        # and a job's changes_of exactly when its objects are not the last run's; 0 when it has none
        by_job: dict[str, list[tuple[str, str]]] = {}
        for obj in listed:
            by_job.setdefault(obj["metadata"]["labels"][JOB_ID_LABEL], []).append(
                (obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])
            )
        for job_id, last in changes.items():
            now = sorted(by_job.get(job_id, []))
            assert (kept.changes_of(job_id) != last) == (now != before_by_job.get(job_id, [])), f"step {step}"
            assert (kept.changes_of(job_id) == 0) == (not now)
        before_by_job = {job_id: sorted(v) for job_id, v in by_job.items()}


def test_objects_without_a_version_are_never_taken_for_unchanged() -> None:
    listing = _Listing()
    objects = [_obj("j1", "j1-worker-0", 1, uid=False)]
    listing.update(objects)
    generation, changes = listing.generation, listing.changes_of("j1")
    listing.update(objects)  # the very same dict: still no telling whether it changed
    assert listing.generation == generation + 1
    assert listing.changes_of("j1") != changes, "nor is its job's reconcile left out"
