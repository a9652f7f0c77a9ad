"""A team at its GPU quota waits while another team uses the rest: a scenario, end to end.

The quota goes from the scenario's `teams` through the local runtime's settings to the
scale check's admission, as cdk.json's goes through the functions' settings file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from squall.conventions import TEAM_LABEL
from squall.core.jobs import JobStatus
from squall.local.runtime import LocalRuntime
from squall.local.scenario import ScenarioError, Simulation, SimulationResult, compile_scenario
from squall.planner.admission import TeamShare

P4D = {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": 8, "pods": 58}
GROUP = {
    "name": "p4d-usw2",
    "region": "us-west-2",
    "asgName": "squall-p4d-usw2",
    "instanceType": "p4d.24xlarge",
    "allocatable": P4D,
    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    "maxSize": 4,
}


def spec(job_id: str, team: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "name": job_id,
        "id": job_id,
        "team": team,
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "resources": {"cpu": "8", "memory": "64Gi", "gpu": gpus},
        "maxRuntime": "2h",
    }


def scenario(**teams: Any) -> dict[str, Any]:
    return {
        "name": "team-quotas",
        "policy": {"idleThreshold": "PT5M", "bootGrace": "PT2M"},
        "regions": {"us-west-2": {"capacity": {"p4d.24xlarge": 4}, "bootTime": "3m"}},
        "nodeGroups": [GROUP],
        "teams": teams
        or {
            "research": {"namespace": "team-research", "gpuQuota": 8, "weight": 1},
            "vision": "team-vision",
        },
        "arrivals": [
            *({"at": "0s", "spec": spec(f"research-{i}", "research"), "runTime": "30m"} for i in range(3)),
            *({"at": "0s", "spec": spec(f"vision-{i}", "vision"), "runTime": "30m"} for i in range(2)),
        ],
        "end": {"when": "scaledDown", "limit": "8h"},
    }


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"]
    )


@pytest.fixture(scope="module")
def quota_run() -> Iterator[tuple[SimulationResult, dict[str, Any]]]:
    seen: dict[str, Any] = {"peak": Counter(), "together": 0, "in_use": [], "quota_waits": set()}

    def before(local: LocalRuntime) -> None:
        assert local.services.scaler.config.teams == {
            "research": TeamShare(quota=8, weight=1.0),
            "vision": TeamShare(),
        }
        advance = local.cluster.advance

        def sampled() -> None:
            advance()
            # the GPUs each team's pods hold on nodes: what runs, or is bound to run
            held: Counter[str] = Counter()
            for pod in local.cluster.list_pods():
                if pod["spec"].get("nodeName") and pod["status"].get("phase") in ("Pending", "Running"):
                    held[pod["metadata"].get("labels", {}).get(TEAM_LABEL, "")] += _gpus(pod)
            for team, gpus in held.items():
                seen["peak"][team] = max(seen["peak"][team], gpus)
            if held["research"] and held["vision"]:
                seen["together"] += 1

        local.cluster.advance = sampled  # type: ignore[method-assign]

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        for check in local.scale_results:
            admission = check.get("plan", {}).get("admission", {})
            seen["in_use"].append(admission.get("inUse", {}))
            seen["quota_waits"].update(
                w["job"] for w in admission.get("waiting", []) if str(w["reason"]).startswith("QuotaExceeded")
            )
        seen["jobs"] = {job.id: job for job in local.jobs()}

    plan = compile_scenario(scenario())
    result = Simulation(plan, backend="memory", pace=False).run(before=before, after=after)
    yield result, seen


@pytest.mark.timeout(300)
def test_a_team_at_its_quota_waits_while_another_uses_the_rest(
    quota_run: tuple[SimulationResult, dict[str, Any]],
) -> None:
    result, seen = quota_run
    assert result.ok, (result.summary, result.notes)
    # every job ran to the end
    assert {job_id: job.status for job_id, job in seen["jobs"].items()} == {
        **{f"research-{i}": JobStatus.SUCCEEDED for i in range(3)},
        **{f"vision-{i}": JobStatus.SUCCEEDED for i in range(2)},
    }
    # research never held more than its 8 GPUs: not on the nodes, not in admission
    assert seen["peak"]["research"] == 8
    assert seen["in_use"], "the scale check ran"
    assert max(in_use.get("research", 0) for in_use in seen["in_use"]) == 8
    # while vision used the rest, both of its jobs at once, beside research's
    assert seen["peak"]["vision"] == 16
    assert seen["together"] > 0
    # and the research jobs behind the first waited on the quota, with its reason
    assert len(seen["quota_waits"]) >= 2 and seen["quota_waits"] <= {f"research-{i}" for i in range(3)}


def test_a_job_larger_than_its_teams_quota_is_refused_before_the_run() -> None:
    doc = scenario(research={"namespace": "team-research", "gpuQuota": 4}, vision="team-vision")
    with pytest.raises(ScenarioError) as caught:
        compile_scenario(doc)
    assert (
        "arrivals[0].spec: the job needs 8 GPUs, more than team research's gpuQuota of 4: it would wait forever"
        in caught.value.errors
    )
