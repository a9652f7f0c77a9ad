"""A name Squall finds taken is kept only when the object is that very job's or service's.

Fuzzing the intake found job ``model-x`` and model service ``x-worker-0`` naming the
same Service, each silently adopting the other's. Names can no longer meet (the model
service's objects are ``<name>-model``), but objects made under the old names live on
in running installations, and anyone may have created an object under a name Squall
wants. Here: the Kubernetes adapter against the API stand-in (409, then a read), and
intake and the serving reconciler on the simulated cluster, which answers as the API
server does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import kmock
import pytest

from squall.adapters.kubernetes.cluster import KubernetesCluster
from squall.conventions import JOB_ID_LABEL, MODEL_SERVICE_LABEL
from squall.core.errors import PermanentError, RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.core.manifests import render
from squall.core.serving import ServiceReason, ServiceStatus, object_name
from squall.core.serving_manifests import render_model_service
from squall.core.spec import parse_spec
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.planner import Policy
from squall.ports import KubeObject
from squall.services.admission import Admitter
from tests.integration.serving_world import SETTINGS, ServingWorld, a_service, serving_world
from tests.job_bodies import job_body
from tests.job_records import StepReport

from .kube_resources import NS
from .kube_server import KubeApi, resource_of

pytestmark = pytest.mark.timeout(120)

TEAM_NS = "team-research"
CPU_NODE = {"cpu": "16", "memory": "64Gi", "pods": "58"}


def job_objects(job_id: str, *, namespace: str = NS) -> list[KubeObject]:
    spec = parse_spec(
        job_body("words", "research", gpu=0, workers=2),
        teams=["research"],
        registries=["registry.example.com"],
    )
    return render(spec, job_id=job_id, namespace=namespace)


def model_objects(name: str, *, namespace: str, legacy: bool = False) -> list[KubeObject]:
    """A model service's Deployment, Service and budget; with `legacy`, named ``model-<name>`` as before."""
    service, _ = a_service(name, at=VirtualClock().now())
    objects = render_model_service(
        service.__class__(**{**service.__dict__, "namespace": namespace}), settings=SETTINGS
    )
    if legacy:
        for obj in objects:
            obj["metadata"]["name"] = f"model-{name}"
    return objects


# ==== the adapter: 409, then whose is it ============================================


@pytest.mark.parametrize("kind", ["Job", "Service"])
def test_a_jobs_object_whose_name_another_holds_is_a_permanent_error(
    cluster: KubernetesCluster, kube: KubeApi, kind: str
) -> None:
    # given a model service made under the old names holds worker 0's names
    wanted = next(
        o for o in job_objects("model-x") if o["kind"] == kind and o["metadata"]["name"].endswith("-0")
    )
    squatter = copy.deepcopy(wanted)
    squatter["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "squall",
        MODEL_SERVICE_LABEL: "x-worker-0",
    }
    kube.put(squatter)
    resource = resource_of(wanted["apiVersion"], kind)

    # when the job's object is created
    with pytest.raises(PermanentError) as refused:
        cluster.create(wanted)

    # then the error names both, and the object is left as it was
    message = str(refused.value)
    assert not isinstance(refused.value, RetryableError)
    assert message.startswith(
        f"create {kind} {NS}/model-x-worker-0: {kind} {NS}/model-x-worker-0 exists already"
    )
    assert "belongs to model service 'x-worker-0', not to job 'model-x' (worker-0)" in message
    assert "neither adopts nor deletes it" in message
    assert kube.get(resource, NS, "model-x-worker-0")["metadata"]["labels"] == squatter["metadata"]["labels"]
    assert kube.requests("delete") == []


@pytest.mark.parametrize("kind", ["Deployment", "Service", "PodDisruptionBudget"])
def test_a_model_services_object_whose_name_another_holds_is_a_permanent_error(
    cluster: KubernetesCluster, kube: KubeApi, kind: str
) -> None:
    # given an object no Squall job or service made holds the name
    wanted = next(o for o in model_objects("mnist", namespace=NS) if o["kind"] == kind)
    squatter = copy.deepcopy(wanted)
    squatter["metadata"]["labels"] = {"app": "someone-elses"}
    kube.put(squatter)

    with pytest.raises(
        PermanentError, match="belongs to no Squall job or model service, not to model service 'mnist'"
    ):
        cluster.create(wanted)
    assert kube.get(resource_of(wanted["apiVersion"], kind), NS, "mnist-model")["metadata"]["labels"] == {
        "app": "someone-elses"
    }


def test_the_same_jobs_object_is_kept_as_before(cluster: KubernetesCluster, kube: KubeApi) -> None:
    objects = job_objects("model-x")
    assert [cluster.create(o) for o in objects] == [True] * len(objects)
    assert [cluster.create(o) for o in objects] == [False] * len(objects)  # a redelivery: nothing new


def test_an_object_gone_between_the_409_and_the_read_is_retried(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    wanted = job_objects("model-x")[0]
    jobs = kmock.resource("batch/v1/jobs")
    kube.fail("post", jobs, status=409, reason="AlreadyExists", times=1)
    kube.fail("get", jobs, status=404, reason="NotFound", times=1)
    with pytest.raises(RetryableError, match="was gone when read"):
        cluster.create(wanted)
    # (the stand-in stored it with the 409, as a server may): the retry finds it, the job's own
    assert cluster.create(wanted) is False


# ==== intake and reconcile on the simulated cluster ==================================


@pytest.fixture
def world(aws_credentials: None) -> Iterator[ServingWorld]:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock)
    cluster.add_node(name="cpu-0", allocatable=CPU_NODE)
    yield from serving_world(cluster, clock=clock)


def legacy_service(
    world: ServingWorld,
    name: str,
    *,
    objects: tuple[str, ...] = ("Deployment", "Service", "PodDisruptionBudget"),
) -> None:
    """A live record and its objects as a Squall before ``<name>-model`` made them."""
    service, event = a_service(name, at=world.clock.now())
    world.services.create(service, event)
    for obj in model_objects(name, namespace=TEAM_NS, legacy=True):
        if obj["kind"] in objects:
            assert world.cluster.create(obj) is True


def names(objects: list[KubeObject], *, label: str | None = None, value: str | None = None) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in objects
        if label is None or (o["metadata"].get("labels") or {}).get(label) == value
    )


def submit_job(world: ServingWorld, job_id: str) -> Any:
    """Submit a job of two CPU workers and let admission create its objects (it fits cpu-0)."""
    body = job_body(job_id, "research", gpu=0, workers=2)
    result = world.handle(body, message_id=f"m-{job_id}")
    admit(world)
    return result


def admit(world: ServingWorld) -> StepReport:
    """Admission as the scale check runs it: what fits gets its objects."""
    report = StepReport()
    Admitter(
        clusters={"local": world.cluster},
        metrics=RecordingMetrics(world.clock),
        teams={},
        policy=Policy(),
        store=world.jobs,
    ).run(now=world.clock.now(), outcome=report)
    return report


def test_a_job_whose_service_an_old_model_service_holds_fails_and_leaves_it(world: ServingWorld) -> None:
    # given model service x-worker-0, served before the names changed: its Service is model-x-worker-0
    legacy_service(world, "x-worker-0")
    cluster: SimulatedCluster = world.cluster

    # when job model-x (workers 0 and 1) is submitted and admitted
    result = submit_job(world, "model-x")

    # then the job fails, saying whose the name is; nothing of the model service is taken or deleted
    job = world.jobs.get("model-x")
    assert result.outcome.value == "created"
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.CLUSTER_REFUSED)
    message = world.jobs.events("model-x")[-1].message
    assert "model-x-worker-0 exists already and belongs to model service 'x-worker-0'" in message
    taken = cluster.get_service(namespace=TEAM_NS, name="model-x-worker-0")
    assert taken is not None and taken["metadata"]["labels"][MODEL_SERVICE_LABEL] == "x-worker-0"
    assert names(cluster.list_services(namespace=TEAM_NS), label=JOB_ID_LABEL, value="model-x") == []
    assert cluster.list_jobs(job_id="model-x") == []  # what it had made went, by its labels


def test_a_job_and_a_model_service_of_the_fuzzed_names_live_side_by_side(world: ServingWorld) -> None:
    cluster: SimulatedCluster = world.cluster
    assert submit_job(world, "model-x").outcome.value == "created"
    world.finished_job("train-1")
    assert (
        world.handle(
            {"action": "serve", "job": "train-1", "name": "x-worker-0"}, message_id="m-s"
        ).outcome.value
        == "created"
    )

    job_services = names(cluster.list_services(namespace=TEAM_NS), label=JOB_ID_LABEL, value="model-x")
    assert job_services == ["model-x-worker-0", "model-x-worker-1"]
    assert names(cluster.list_services(namespace=TEAM_NS), label=MODEL_SERVICE_LABEL, value="x-worker-0") == [
        "x-worker-0-model"
    ]
    # unserve removes the model service's objects and none of the job's
    world.intake().unserve(name="x-worker-0", reason="done")
    assert (
        names(cluster.list_services(namespace=TEAM_NS), label=JOB_ID_LABEL, value="model-x") == job_services
    )
    assert (
        names(cluster.list_services(namespace=TEAM_NS), label=MODEL_SERVICE_LABEL, value="x-worker-0") == []
    )


def test_a_service_made_under_the_old_names_is_followed_and_removed_by_its_labels(
    world: ServingWorld,
) -> None:
    cluster: SimulatedCluster = world.cluster
    legacy_service(world, "mnist")
    for _ in range(3):
        world.advance(1)
        world.reconciler().run()
    service = world.services.get("mnist")
    assert (service.status, service.reason) == (ServiceStatus.SERVING, "Ready:1/1")
    assert names(cluster.list_deployments()) == ["model-mnist"]  # nothing made again under the new name

    world.intake().unserve(name="mnist", reason="done")
    assert cluster.list_deployments() == []
    assert names(cluster.list_services(namespace=TEAM_NS)) == [] and cluster.list_pdbs() == []


def test_an_old_service_missing_its_service_is_made_again_under_the_new_names_only(
    world: ServingWorld,
) -> None:
    # given a service made before, whose Service object was deleted by hand
    cluster: SimulatedCluster = world.cluster
    legacy_service(world, "mnist", objects=("Deployment", "PodDisruptionBudget"))
    world.advance(1)

    # when reconcile finds the Service gone
    report = world.reconciler().run()

    # then the old objects went first: one Deployment and one budget, under the new name
    assert report.recreated == ["mnist"]
    assert names(cluster.list_deployments()) == [object_name("mnist")] == ["mnist-model"]
    assert names(cluster.list_pdbs()) == ["mnist-model"]
    assert names(cluster.list_services(namespace=TEAM_NS)) == ["mnist-model"]
    assert world.services.get("mnist").reason == ServiceReason.OBJECTS_RECREATED


def test_an_old_service_whose_service_name_a_job_holds_fails_and_leaves_the_jobs(world: ServingWorld) -> None:
    # given job model-x's Service model-x-worker-0, and model service x-worker-0's old Deployment
    cluster: SimulatedCluster = world.cluster
    assert submit_job(world, "model-x").outcome.value == "created"
    legacy_service(world, "x-worker-0", objects=("Deployment", "PodDisruptionBudget"))
    world.advance(1)

    # when reconcile reads the model service's Service under its Deployment's name
    world.reconciler().run()

    # then the model service fails, saying why; the job's Service stays where it was
    service = world.services.get("x-worker-0")
    assert (service.status, service.reason) == (ServiceStatus.FAILED, ServiceReason.CLUSTER_REFUSED)
    message = world.services.events("x-worker-0")[-1].message
    assert "belongs to job 'model-x' (worker-0), not to model service 'x-worker-0'" in message
    kept = cluster.get_service(namespace=TEAM_NS, name="model-x-worker-0")
    assert kept is not None and kept["metadata"]["labels"][JOB_ID_LABEL] == "model-x"
    assert cluster.list_deployments() == [] and cluster.list_pdbs() == []


def test_a_sweep_whose_later_trial_finds_its_name_taken_leaves_no_trial_to_run(world: ServingWorld) -> None:
    # given someone else's Service under the name of trial 1's worker 0
    cluster: SimulatedCluster = world.cluster
    squatter = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "sw-t001-worker-0", "namespace": TEAM_NS, "labels": {"app": "someone-elses"}},
        "spec": {"ports": [{"port": 80}]},
    }
    assert cluster.create(squatter) is True

    # when a sweep of three distributed trials is submitted and admitted
    body = job_body("sw", "research", gpu=0, workers=2) | {"sweep": {"parameters": {"lr": [1, 2, 3]}}}
    assert world.handle(body, message_id="m-sw").outcome.value == "created"
    admit(world)

    # then trial 1 failed with why, none of its objects is left; the other trials are not held up
    job = world.jobs.get("sw-t001")
    assert job is not None and (job.status, job.reason) == (JobStatus.FAILED, Reason.CLUSTER_REFUSED)
    assert cluster.list_jobs(job_id="sw-t001") == []
    assert world.jobs.get("sw-t000").status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert cluster.list_jobs(job_id="sw-t000"), "trial 0 was admitted"
    kept = [n for n in names(cluster.list_services(namespace=TEAM_NS)) if n.startswith("sw-t001")]
    assert kept == ["sw-t001-worker-0"]  # left as it was
