"""Manifest rendering: TF_CONFIG exactly as Kubeflow writes it, and every object valid upstream."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from squall.core.manifests import render, tf_config
from squall.core.spec import JobSpec, parse_spec

K8S_VERSION = "1.32.0"


def parse(**overrides: Any) -> JobSpec:
    base: dict[str, Any] = {
        "name": "mnist",
        "team": "research",
        "image": "registry.example.com/squall/tf:1",
        "resources": {"cpu": "8", "memory": "60Gi", "gpu": 1},
    }
    return parse_spec(base | overrides, teams=["research"], registries=["registry.example.com/squall"])


DISTRIBUTED = {
    "replicas": {
        "chief": 1,
        "worker": {"count": 2},
        "ps": {"count": 2, "resources": {"cpu": "4", "memory": "16Gi", "gpu": 0}},
    }
}


def env_of(job: dict[str, Any]) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


def test_tf_config_matches_the_design_document_byte_for_byte() -> None:
    spec = parse(**DISTRIBUTED)
    worker_1 = next(r for r in spec.replica_list() if (r.type, r.index) == ("worker", 1))
    assert tf_config(spec, job_id="mnist", namespace="team-a", replica=worker_1) == (
        '{"cluster":{"chief":["mnist-chief-0.team-a.svc:2222"],"ps":["mnist-ps-0.team-a.svc:2222",'
        '"mnist-ps-1.team-a.svc:2222"],"worker":["mnist-worker-0.team-a.svc:2222",'
        '"mnist-worker-1.team-a.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
    )


def test_distributed_job_gets_one_job_and_one_headless_service_per_replica() -> None:
    objects = render(parse(**DISTRIBUTED), job_id="mnist", namespace="team-a")
    jobs = [o for o in objects if o["kind"] == "Job"]
    services = [o for o in objects if o["kind"] == "Service"]
    names = ["mnist-chief-0", "mnist-ps-0", "mnist-ps-1", "mnist-worker-0", "mnist-worker-1"]
    assert [j["metadata"]["name"] for j in jobs] == names
    assert [s["metadata"]["name"] for s in services] == names
    assert all(s["spec"]["clusterIP"] == "None" for s in services)
    for job in jobs:
        config = json.loads(env_of(job)["TF_CONFIG"])
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert config["task"] == {"type": labels["squall.io/replica-type"], "index": int(labels["squall.io/replica-index"])}
        assert labels["squall.io/job-id"] == "mnist" and labels["app.kubernetes.io/managed-by"] == "squall"
        affinity = job["spec"]["template"]["spec"]["affinity"]["podAffinity"]
        assert affinity["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "topology.kubernetes.io/region"


def test_gpu_requests_tolerations_and_limits_from_the_spec() -> None:
    objects = render(parse(**DISTRIBUTED, maxRuntime="6h", retries=3), job_id="mnist", namespace="team-a")
    by_name = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}
    chief, ps = by_name["mnist-chief-0"], by_name["mnist-ps-0"]
    resources = chief["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    assert chief["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "nvidia.com/gpu" not in ps["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert "tolerations" not in ps["spec"]["template"]["spec"]
    assert chief["spec"]["backoffLimit"] == 3
    assert chief["spec"]["activeDeadlineSeconds"] == 6 * 3600
    assert chief["spec"]["ttlSecondsAfterFinished"] == 3600


def test_disruptions_count_as_retries_before_exit_codes_fail_the_job() -> None:
    # Kubernetes applies the first matching rule; an evicted trainer exits 143.
    rules = render(parse(), job_id="m", namespace="n")[0]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1] == {"action": "Count", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]}}
    assert rules[2]["action"] == "FailJob"


def test_cpu_only_replicas_follow_the_gpu_replicas_region() -> None:
    objects = {o["metadata"]["name"]: o for o in render(parse(**DISTRIBUTED), job_id="mnist", namespace="n") if o["kind"] == "Job"}
    for name in ("mnist-ps-0", "mnist-chief-0", "mnist-worker-1"):
        term = objects[name]["spec"]["template"]["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ][0]
        assert term["labelSelector"]["matchExpressions"] == [
            {"key": "squall.io/replica-type", "operator": "In", "values": ["chief", "worker"]}
        ]


def test_single_pod_job_has_no_tf_config_and_no_service() -> None:
    objects = render(parse(), job_id="solo-1", namespace="team-a")
    assert [o["kind"] for o in objects] == ["Job"]
    assert "TF_CONFIG" not in env_of(objects[0])
    assert env_of(objects[0])["SQUALL_JOB_ID"] == "solo-1"


def test_rendering_is_deterministic() -> None:
    spec = parse(**DISTRIBUTED)
    assert render(spec, job_id="m", namespace="n") == render(spec, job_id="m", namespace="n")


def test_users_cannot_reach_privileged_settings() -> None:
    for obj in render(parse(**DISTRIBUTED), job_id="m", namespace="n"):
        if obj["kind"] != "Job":
            continue
        pod = obj["spec"]["template"]["spec"]
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and "volumes" not in pod
        assert pod["automountServiceAccountToken"] is False
        security = pod["containers"][0]["securityContext"]
        assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False


LONGEST = {
    "name": "n" * 36,
    "id": "i" * 45,
    "replicas": {"chief": 1, "worker": {"count": 64}, "ps": {"count": 16}, "evaluator": 1},
    "placement": {"regions": ["us-west-2"], "nodeGroups": ["p3-usw2"], "spot": "never"},
    # One trial at a time: 82 replicas and their Services are the most one message may create.
    "sweep": {"parameters": {"lr": [0.1, 0.2]}, "maxTrials": 100, "parallelism": 1},
    "env": {"A": "1"},
    "checkpointUri": "s3://bucket/ckpt",
}


@pytest.mark.parametrize(
    "overrides", [{}, DISTRIBUTED, {"placement": {"spot": "required"}}, {"id": "i" * 45, **DISTRIBUTED}],
    ids=["single", "distributed", "spot", "long-id"],
)
def test_every_manifest_validates_against_the_upstream_schemas(overrides: dict[str, Any]) -> None:
    for obj in render(parse(**overrides), job_id=overrides.get("id", "mnist-3f9a1c2b"), namespace="team-research"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert len(obj["metadata"]["name"]) <= 63


def test_longest_possible_trial_names_stay_valid() -> None:
    from squall.core.spec import expand_sweep

    spec = parse(**LONGEST)
    trial_id, trial = expand_sweep(spec, job_id=spec.id or "")[-1]
    for obj in render(trial, job_id=trial_id, namespace="team-research"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert len(obj["metadata"]["name"]) <= 63, obj["metadata"]["name"]
    assert env_of(render(trial, job_id=trial_id, namespace="x")[0])["SQUALL_PARAM_LR"] == "0.2"


def test_schema_validation_would_catch_a_broken_manifest() -> None:
    job = render(parse(), job_id="m", namespace="n")[0]
    job["spec"]["backoffLimit"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


CODE_URI = "s3://squall-artifacts/code/research/" + "ab" * 32 + ".tar.gz"


def container_of(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def test_every_job_pod_runs_as_the_team_service_account() -> None:
    for overrides in ({}, DISTRIBUTED):
        for job in [o for o in render(parse(**overrides), job_id="m", namespace="team-research") if o["kind"] == "Job"]:
            pod = job["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == "squall-job"
            # Pod Identity mounts its own token; the Kubernetes API token stays out
            assert pod["automountServiceAccountToken"] is False


def test_a_job_with_code_runs_its_command_through_the_launcher() -> None:
    spec = parse(codeUri=CODE_URI, command=["python", "train.py"], args=["--epochs", "3"], **DISTRIBUTED)
    for job in [o for o in render(spec, job_id="m", namespace="team-research") if o["kind"] == "Job"]:
        container = container_of(job)
        assert container["command"] == ["python", "-m", "trainer.launch", "--", "python", "train.py"]
        assert container["args"] == ["--epochs", "3"]
        assert env_of(job)["SQUALL_CODE_URI"] == CODE_URI
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_a_job_with_code_and_no_command_runs_the_trainer_from_it() -> None:
    job = render(parse(codeUri=CODE_URI, args=["--steps", "10"]), job_id="m", namespace="n")[0]
    assert container_of(job)["command"] == ["python", "-m", "trainer.launch", "--", "python", "-m", "trainer"]
    assert container_of(job)["args"] == ["--steps", "10"]


def test_a_job_without_code_is_rendered_as_before() -> None:
    job = render(parse(command=["python", "-m", "trainer"]), job_id="m", namespace="n")[0]
    assert container_of(job)["command"] == ["python", "-m", "trainer"]
    assert "SQUALL_CODE_URI" not in env_of(job)
    assert "command" not in container_of(render(parse(), job_id="m", namespace="n")[0])


def test_sweep_trials_with_code_validate_upstream() -> None:
    from squall.core.spec import expand_sweep

    spec = parse(**LONGEST, codeUri=CODE_URI)
    trial_id, trial = expand_sweep(spec, job_id=spec.id or "")[-1]
    for obj in render(trial, job_id=trial_id, namespace="team-research"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        if obj["kind"] == "Job":
            assert env_of(obj)["SQUALL_CODE_URI"] == CODE_URI


def test_with_preemption_on_the_pods_get_its_grace_to_checkpoint_and_still_validate() -> None:
    from datetime import timedelta

    objects = render(
        parse(**DISTRIBUTED),
        job_id="mnist-3f9a1c2b",
        namespace="team-research",
        region="us-west-2",
        termination_grace=timedelta(seconds=120),
    )
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert {j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] for j in jobs} == {120}
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    # without it, Kubernetes' default
    plain = render(parse(), job_id="mnist-3f9a1c2b", namespace="team-research")
    assert "terminationGracePeriodSeconds" not in plain[0]["spec"]["template"]["spec"]
