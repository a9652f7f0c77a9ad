"""SimulatedCluster's model-service objects: Deployments, their pods' restarts and readiness, budgets, Services."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.core.errors import PermanentError
from squall.core.serving_manifests import render_model_service
from squall.core.settings import ServingSettings
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.ports import KubeObject, ServingCluster
from tests.serving_records import first_record

from .sim import CPU_NODE, NS, condition, make_cluster, one_node_cluster

pytestmark = pytest.mark.timeout(120)

SETTINGS = ServingSettings(
    image="registry.example.com/tensorflow/serving:2.16.1", fetch_image="registry.example.com/squall/worker:1"
)
POD_NAME = re.compile(r"^mnist-model-[bcdfghjklmnpqrstvwxz2456789]{10}-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def rendered(name: str = "mnist", *, replicas: int = 2, gpus: int = 0) -> list[KubeObject]:
    service, _ = first_record(
        name,
        at=datetime(2026, 1, 5, 9, tzinfo=UTC),
        namespace=NS,
        job_id="job-1",
        replicas=replicas,
        gpus=gpus,
    )
    return render_model_service(service, settings=SETTINGS)


def by_kind(objects: list[KubeObject]) -> dict[str, KubeObject]:
    return {obj["kind"]: obj for obj in objects}


def serve(cluster: SimulatedCluster, name: str = "mnist", *, replicas: int = 2) -> None:
    for obj in rendered(name, replicas=replicas):
        assert cluster.create(obj) is True
    cluster.advance()


def pods_of(cluster: SimulatedCluster, name: str = "mnist") -> list[KubeObject]:
    return sorted(
        cluster.list_model_service_pods(namespace=NS, model_service=name), key=lambda p: p["metadata"]["name"]
    )


def deployment(cluster: SimulatedCluster, name: str = "mnist") -> KubeObject:
    (found,) = cluster.list_deployments(namespace=NS, model_service=name)
    return found


def ready(pod: Mapping[str, Any]) -> bool:
    found = condition(dict(pod), "Ready")
    return found is not None and found["status"] == "True"


def serving_status(pod: Mapping[str, Any]) -> dict[str, Any]:
    (entry,) = pod["status"]["containerStatuses"]
    assert entry["name"] == "serving"
    return entry


class Runner:
    """A PodRunner for model-service pods: exits when told, ready when told, ports per pod."""

    def __init__(self, *, readiness: bool = True) -> None:
        self.starts: list[str] = []
        self.stops: list[str] = []
        self.exits: dict[str, int] = {}
        self.ready_pods: set[str] = set()
        self.listening: dict[str, dict[int, int]] = {}
        if not readiness:
            self.ready = None  # type: ignore[assignment]

    def runs(self, pod: KubeObject) -> bool:
        return "squall.io/model-service" in pod["metadata"]["labels"]

    def start(self, pod: KubeObject) -> bool:
        self.starts.append(pod["metadata"]["name"])
        return True

    def poll(self, pod: KubeObject) -> int | None:
        return self.exits.pop(pod["metadata"]["name"], None)

    def stop(self, pod: KubeObject) -> None:
        self.stops.append(pod["metadata"]["name"])

    def ready(self, pod: KubeObject) -> bool:
        return pod["metadata"]["name"] in self.ready_pods

    def ports(self, pod: KubeObject) -> Mapping[int, int] | None:
        return self.listening.get(pod["metadata"]["name"])


def test_the_cluster_is_held_to_the_serving_port() -> None:
    cluster: ServingCluster = make_cluster()[0]
    assert cluster.list_deployments() == []


# ==== the Deployment and its pods ========================================================


def test_a_deployment_runs_its_replicas_named_after_its_replica_set() -> None:
    # given
    cluster, _ = one_node_cluster()

    # when
    serve(cluster)

    # then
    pods = pods_of(cluster)
    assert len(pods) == 2 and all(POD_NAME.match(p["metadata"]["name"]) for p in pods)
    template_hash = pods[0]["metadata"]["labels"]["pod-template-hash"]
    assert {p["metadata"]["labels"]["pod-template-hash"] for p in pods} == {template_hash}
    assert pods[0]["metadata"]["name"].startswith(f"mnist-model-{template_hash}-")
    (owner,) = pods[0]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "ReplicaSet",
        f"mnist-model-{template_hash}",
        True,
    )
    for pod in pods:
        assert pod["status"]["phase"] == "Running" and ready(pod)
        (init,) = pod["status"]["initContainerStatuses"]
        assert init["name"] == "fetch-model" and init["state"]["terminated"]["exitCode"] == 0
        status = serving_status(pod)
        assert "running" in status["state"] and status["restartCount"] == 0 and status["ready"] is True
    found = deployment(cluster)
    assert found["status"]["replicas"] == 2
    assert found["status"]["readyReplicas"] == 2 and found["status"]["availableReplicas"] == 2
    assert found["status"]["updatedReplicas"] == 2 and found["status"]["observedGeneration"] == 1
    assert "unavailableReplicas" not in found["status"]
    assert condition(found, "Available")["status"] == "True"  # type: ignore[index]
    assert condition(found, "Progressing")["reason"] == "NewReplicaSetAvailable"  # type: ignore[index]
    assert found["spec"]["template"]["spec"]["restartPolicy"] == "Always"


def test_creating_it_again_is_false_and_changes_nothing() -> None:
    cluster, _ = one_node_cluster()
    serve(cluster)
    before = names(pods_of(cluster))

    again = [cluster.create(obj) for obj in rendered()]

    assert again == [False, False, False]
    assert names(pods_of(cluster)) == before


def names(pods: list[KubeObject]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["spec"].update(replicas=-1), "spec.replicas"),
        (lambda d: d["spec"].update(replicas=10**9), "spec.replicas"),
        (lambda d: d["spec"].update(replicas=True), "spec.replicas"),
        (lambda d: d["spec"].update(progressDeadlineSeconds=0), "spec.progressDeadlineSeconds"),
        (lambda d: d["spec"].pop("selector"), "spec.selector"),
        (lambda d: d["spec"].update(selector={"matchLabels": {}}), "spec.selector"),
        (
            lambda d: d["spec"].update(selector={"matchLabels": {"squall.io/model-service": "other"}}),
            "spec.template.metadata.labels",
        ),
        (
            lambda d: d["spec"]["template"]["spec"].update(restartPolicy="Never"),
            "spec.template.spec.restartPolicy",
        ),
        (lambda d: d["spec"]["template"]["spec"].update(containers=[]), "spec.template.spec.containers"),
        (lambda d: d.update(spec=[]), "spec"),
    ],
)
def test_a_deployment_the_api_server_refuses_names_the_field_and_leaves_nothing(
    change: Any, field: str
) -> None:
    cluster, _ = one_node_cluster()
    manifest = by_kind(rendered())["Deployment"]
    change(manifest)

    with pytest.raises(PermanentError, match=re.escape(field)):
        cluster.create(manifest)

    cluster.advance()
    assert cluster.list_deployments() == [] and cluster.list_pods() == []


def test_bad_resource_requests_are_refused_before_anything_is_stored() -> None:
    cluster, _ = make_cluster()
    manifest = by_kind(rendered())["Deployment"]
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"

    with pytest.raises(PermanentError, match="invalid resource requests"):
        cluster.create(manifest)
    assert cluster.list_deployments() == []


def test_a_deleted_pod_is_replaced_and_the_replicas_are_kept() -> None:
    # given
    cluster, _ = one_node_cluster()
    serve(cluster)
    first, second = names(pods_of(cluster))

    # when
    assert cluster.delete_pod(namespace=NS, name=first) is True
    replaced = names(pods_of(cluster))
    cluster.advance()

    # then: the ReplicaSet made a new pod at once; it runs on the next advance
    assert len(replaced) == 2 and first not in replaced and second in replaced
    pods = pods_of(cluster)
    assert all(p["status"]["phase"] == "Running" and ready(p) for p in pods)
    assert deployment(cluster)["status"]["readyReplicas"] == 2
    assert cluster.delete_pod(namespace=NS, name=first) is False  # gone already


def test_pods_lost_with_their_node_come_back_on_another_node() -> None:
    # given both replicas on n1
    cluster, _ = one_node_cluster()
    serve(cluster)
    lost = names(pods_of(cluster))

    # when n1 goes
    cluster.remove_node("n1")

    # then they are re-created, waiting for a node
    pods = pods_of(cluster)
    assert len(pods) == 2 and not set(names(pods)) & set(lost)
    assert all(p["status"]["phase"] == "Pending" for p in pods)
    waiting = deployment(cluster)["status"]
    assert "readyReplicas" not in waiting and waiting["unavailableReplicas"] == 2
    assert condition(deployment(cluster), "Available")["status"] == "False"  # type: ignore[index]
    # and run again once a node joins
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.advance()
    assert {p["spec"]["nodeName"] for p in pods_of(cluster)} == {"n2"}
    assert deployment(cluster)["status"]["readyReplicas"] == 2


def test_an_evicted_pod_is_replaced() -> None:
    cluster, _ = one_node_cluster()
    serve(cluster, replicas=1)
    (evicted,) = names(pods_of(cluster))

    assert cluster.evict(namespace=NS, name=evicted) is True  # the budget allows one of one to go

    (replacement,) = pods_of(cluster)
    assert replacement["metadata"]["name"] != evicted


def test_a_deployment_that_cannot_progress_reports_the_deadline_exceeded() -> None:
    # given no node at all: the pods stay Pending
    cluster, clock = make_cluster()
    serve(cluster, replicas=1)
    assert condition(deployment(cluster), "Progressing")["status"] == "True"  # type: ignore[index]

    # when progressDeadlineSeconds (600) pass; the clock can jump straight there
    due = cluster.next_event_time()
    assert due == clock.now() + timedelta(seconds=600)
    clock.advance(timedelta(seconds=600))
    cluster.advance()

    # then
    progressing = condition(deployment(cluster), "Progressing")
    assert progressing is not None
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert "timed out progressing" in progressing["message"]
    # and progress afterwards puts it right
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.advance()
    assert condition(deployment(cluster), "Progressing")["reason"] == "NewReplicaSetAvailable"  # type: ignore[index]


def test_a_complete_deployment_never_times_out_when_a_pod_is_lost_later() -> None:
    cluster, clock = one_node_cluster()
    serve(cluster, replicas=1)
    cluster.remove_node("n1")

    clock.advance(timedelta(hours=1))
    cluster.advance()

    assert condition(deployment(cluster), "Progressing")["reason"] == "NewReplicaSetAvailable"  # type: ignore[index]


# ==== restartPolicy Always: crash loops ===================================================


def test_a_container_that_exits_is_restarted_with_back_off_and_counted() -> None:
    # given one replica run by the runner
    runner = Runner(readiness=False)
    cluster, clock = one_node_cluster(runner=runner)
    serve(cluster, replicas=1)
    (pod,) = pods_of(cluster)
    name = pod["metadata"]["name"]
    delays = []

    for restart in range(1, 8):
        # when its process exits
        runner.exits[name] = 2
        cluster.advance()

        # then the pod is still Running, its container waiting in CrashLoopBackOff
        (pod,) = pods_of(cluster)
        status = serving_status(pod)
        assert pod["metadata"]["name"] == name and pod["status"]["phase"] == "Running"
        assert status["restartCount"] == restart
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert status["lastState"]["terminated"]["exitCode"] == 2
        assert not ready(pod)
        # and after the back-off it runs again (the clock jumps from event to event)
        crashed_at = clock.now()
        while "running" not in serving_status(pod)["state"]:
            due = cluster.next_event_time()
            assert due is not None and due - crashed_at <= timedelta(minutes=5)
            clock.advance(due - clock.now())
            cluster.advance()
            (pod,) = pods_of(cluster)
        delays.append((clock.now() - crashed_at).total_seconds())
        assert serving_status(pod)["lastState"]["terminated"]["exitCode"] == 2
        assert ready(pod)

    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert runner.starts == [name] * 8  # started once, then once per restart
    assert deployment(cluster)["status"]["readyReplicas"] == 1


def test_simulated_pods_keep_running_unless_their_service_is_told_to_exit() -> None:
    cluster, clock = one_node_cluster()
    serve(cluster, "keeps", replicas=1)
    cluster.set_model_service_behaviour("crashes", run_for=timedelta(seconds=5), exit_code=1)
    serve(cluster, "crashes", replicas=1)

    clock.advance(timedelta(hours=2))
    cluster.advance()

    assert serving_status(pods_of(cluster, "keeps")[0])["restartCount"] == 0
    crashed = serving_status(pods_of(cluster, "crashes")[0])
    assert crashed["restartCount"] >= 3
    assert crashed["lastState"]["terminated"]["exitCode"] == 1


def test_an_image_that_cannot_be_pulled_shows_on_the_init_and_serving_containers() -> None:
    cluster, _ = one_node_cluster()
    cluster.set_model_service_behaviour("mnist", image_error=True)
    serve(cluster, replicas=1)

    (pod,) = pods_of(cluster)

    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert serving_status(pod)["state"]["waiting"]["reason"] == "ImagePullBackOff"


# ==== readiness ==========================================================================


def test_a_real_pod_with_a_readiness_probe_is_ready_only_while_its_runner_says_so() -> None:
    # given
    runner = Runner()
    cluster, _ = one_node_cluster(runner=runner)
    serve(cluster, replicas=1)
    (pod,) = pods_of(cluster)
    name = pod["metadata"]["name"]

    # then: running, not ready
    assert pod["status"]["phase"] == "Running" and not ready(pod)
    assert serving_status(pod)["ready"] is False
    assert "readyReplicas" not in deployment(cluster)["status"]

    # when the model has loaded
    runner.ready_pods.add(name)
    cluster.advance()
    assert ready(pods_of(cluster)[0]) and deployment(cluster)["status"]["readyReplicas"] == 1

    # and when it stops answering
    runner.ready_pods.clear()
    cluster.advance()
    assert not ready(pods_of(cluster)[0]) and "readyReplicas" not in deployment(cluster)["status"]


# ==== PodDisruptionBudgets from manifests ================================================


def test_the_budget_refuses_the_second_eviction_until_the_first_replacement_is_ready() -> None:
    # given both replicas on n1, which is being drained (cordoned)
    cluster, _ = one_node_cluster()
    serve(cluster)
    first, second = names(pods_of(cluster))
    cluster.patch_node("n1", {"spec": {"unschedulable": True}})

    # when the first is evicted, its replacement has nowhere to go
    assert cluster.evict(namespace=NS, name=first) is True
    cluster.advance()

    # then the second may not go
    assert cluster.evict(namespace=NS, name=second) is False
    assert second in names(pods_of(cluster))
    # until the replacement runs, ready, elsewhere
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.advance()
    assert cluster.evict(namespace=NS, name=second) is True


def test_a_running_replacement_that_is_not_ready_does_not_count_as_healthy() -> None:
    runner = Runner()
    cluster, _ = one_node_cluster(runner=runner)
    serve(cluster)
    first, second = names(pods_of(cluster))
    runner.ready_pods.update({first, second})
    cluster.advance()

    assert cluster.evict(namespace=NS, name=first) is True
    cluster.advance()
    (replacement,) = set(names(pods_of(cluster))) - {second}
    assert pods_of(cluster)[0]["status"]["phase"] == "Running"

    assert cluster.evict(namespace=NS, name=second) is False  # the replacement runs but is not ready
    runner.ready_pods.add(replacement)
    cluster.advance()
    assert cluster.evict(namespace=NS, name=second) is True


def test_a_budget_counts_like_add_pdb_and_unhealthy_pods_may_always_go() -> None:
    # given a crash-looping replica under the rendered budget (unhealthyPodEvictionPolicy AlwaysAllow)
    cluster, _ = one_node_cluster()
    cluster.set_model_service_behaviour("mnist", run_for=timedelta(0), exit_code=1)
    serve(cluster, replicas=1)
    (pod,) = pods_of(cluster)
    assert not ready(pod)

    assert cluster.evict(namespace=NS, name=pod["metadata"]["name"]) is True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"selector": {"matchLabels": {"a": "b"}}}, "exactly one of minAvailable and maxUnavailable"),
        ({"maxUnavailable": 1, "minAvailable": 1, "selector": {}}, "exactly one"),
        ({"maxUnavailable": -1, "selector": {}}, "spec.maxUnavailable"),
        ({"minAvailable": "150%", "selector": {}}, "spec.minAvailable"),
        ({"maxUnavailable": 1}, "spec.selector"),
        (
            {"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Maybe"}]}},
            "operator",
        ),
        (
            {"maxUnavailable": 1, "selector": {}, "unhealthyPodEvictionPolicy": "Never"},
            "unhealthyPodEvictionPolicy",
        ),
    ],
)
def test_a_budget_the_api_server_refuses_names_the_field(spec: dict[str, Any], field: str) -> None:
    cluster, _ = make_cluster()
    manifest = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": NS},
        "spec": spec,
    }

    with pytest.raises(PermanentError, match=re.escape(field)):
        cluster.create(manifest)
    assert cluster.list_pdbs() == []


def test_a_percentage_budget_is_of_the_pods_it_covers() -> None:
    cluster, _ = one_node_cluster()
    manifest = by_kind(rendered(replicas=3))["PodDisruptionBudget"]
    manifest["spec"] = {"minAvailable": "50%", "selector": manifest["spec"]["selector"]}  # 2 of 3, rounded up
    for obj in rendered(replicas=3):
        cluster.create(manifest if obj["kind"] == "PodDisruptionBudget" else obj)
    cluster.advance()
    cluster.patch_node("n1", {"spec": {"unschedulable": True}})
    first, second, _ = names(pods_of(cluster))

    assert cluster.evict(namespace=NS, name=first) is True
    assert cluster.evict(namespace=NS, name=second) is False


# ==== Services ===========================================================================


def test_a_load_balancer_gets_the_spec_ports_without_a_runner() -> None:
    cluster, _ = one_node_cluster()
    serve(cluster)

    service = cluster.get_service(namespace=NS, name="mnist-model")

    assert service is not None
    assert service["status"]["loadBalancer"]["ingress"] == [
        {"ip": "127.0.0.1", "ports": [{"port": 8501, "protocol": "TCP"}, {"port": 8500, "protocol": "TCP"}]}
    ]
    assert cluster.get_service(namespace=NS, name="other-model") is None


def test_a_load_balancer_points_at_the_ports_the_first_ready_pod_really_listens_on() -> None:
    # given two replicas run for real, listening on loopback ports of their own
    runner = Runner()
    cluster, _ = one_node_cluster(runner=runner)
    serve(cluster)
    pods = pods_of(cluster)
    first, second = (
        sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])[0]["metadata"]["name"],
        None,
    )
    second = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != first)
    runner.listening = {first: {8501: 41001, 8500: 41000}, second: {8501: 42001, 8500: 42000}}

    def ingress_ports() -> list[int]:
        service = cluster.get_service(namespace=NS, name="mnist-model")
        assert service is not None
        return [p["port"] for p in service["status"]["loadBalancer"]["ingress"][0]["ports"]]

    # while none is ready: the spec ports
    assert ingress_ports() == [8501, 8500]
    # the second ready first: its ports (http, then grpc, as spec.ports lists them)
    runner.ready_pods.add(second)
    cluster.advance()
    assert ingress_ports() == [42001, 42000]
    # it goes: the other one's
    runner.ready_pods.add(first)
    cluster.delete_pod(namespace=NS, name=second)
    cluster.advance()
    assert ingress_ports() == [41001, 41000]


def test_a_cluster_ip_service_has_no_load_balancer() -> None:
    cluster, _ = make_cluster()
    service = by_kind(rendered())["Service"]
    service["spec"]["type"] = "ClusterIP"
    cluster.create(service)

    found = cluster.get_service(namespace=NS, name="mnist-model")

    assert found is not None and found["status"] == {"loadBalancer": {}}


# ==== listing and deleting ===============================================================


def test_list_deployments_lists_squall_model_services_only() -> None:
    cluster, _ = make_cluster()
    serve(cluster, "mnist")
    serve(cluster, "cifar")
    theirs = by_kind(rendered("theirs"))["Deployment"]
    theirs["metadata"]["labels"] = {"squall.io/model-service": "theirs"}
    cluster.create(theirs)

    assert sorted(d["metadata"]["name"] for d in cluster.list_deployments()) == ["cifar-model", "mnist-model"]
    assert [d["metadata"]["name"] for d in cluster.list_deployments(model_service="cifar")] == ["cifar-model"]
    assert cluster.list_deployments(namespace="team-b") == []
    assert cluster.list_deployments(model_service="theirs") == []


def test_delete_model_service_objects_removes_the_three_objects_and_the_pods() -> None:
    # given
    runner = Runner()
    cluster, _ = one_node_cluster(runner=runner)
    serve(cluster, "mnist")
    serve(cluster, "cifar", replicas=1)
    running = names(pods_of(cluster, "mnist"))

    # when
    deleted = cluster.delete_model_service_objects(namespace=NS, model_service="mnist")

    # then
    assert deleted == 3
    assert pods_of(cluster, "mnist") == [] and len(pods_of(cluster, "cifar")) == 1
    assert sorted(runner.stops) == running  # the real pods were stopped
    assert cluster.get_service(namespace=NS, name="mnist-model") is None
    assert [b["metadata"]["name"] for b in cluster.list_pdbs()] == ["cifar-model"]
    assert [d["metadata"]["name"] for d in cluster.list_deployments()] == ["cifar-model"]
    assert cluster.delete_model_service_objects(namespace=NS, model_service="mnist") == 0
    assert cluster.delete_model_service_objects(namespace="team-b", model_service="cifar") == 0


def test_a_deleted_budget_no_longer_counts_for_evictions() -> None:
    # given the budget over pods of a Deployment that is not Squall's (so it stays)
    cluster, _ = one_node_cluster()
    objects = by_kind(rendered())
    objects["Deployment"]["metadata"]["labels"] = {}
    for obj in objects.values():
        cluster.create(obj)
    cluster.advance()
    first, second = names(pods_of(cluster))
    cluster.patch_node("n1", {"spec": {"unschedulable": True}})
    cluster.evict(namespace=NS, name=first)
    assert cluster.evict(namespace=NS, name=second) is False

    # when
    assert cluster.delete_model_service_objects(namespace=NS, model_service="mnist") == 2  # Service, budget

    # then
    assert cluster.list_pdbs() == []
    assert cluster.evict(namespace=NS, name=second) is True


def test_port_calls_are_recorded_and_can_be_made_to_fail() -> None:
    cluster, _ = make_cluster()
    cluster.fail_calls("list_deployments", PermanentError("down"))

    with pytest.raises(PermanentError, match="down"):
        cluster.list_deployments()
    assert [c.method for c in cluster.calls] == ["list_deployments"]


# ==== shared lists ========================================================================


def test_checked_lists_of_deployments_and_their_pods_stay_true_through_every_change() -> None:
    # Every change must come with a new resourceVersion, or "checked" lists fail loudly.
    runner = Runner()
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, runner=runner, lists="checked")
    cluster.add_node(name="n1", allocatable=CPU_NODE)

    def look() -> tuple[list[KubeObject], list[KubeObject]]:
        return cluster.list_deployments(), cluster.list_pods()

    for obj in rendered():
        cluster.create(obj)
    look()
    cluster.advance()
    first = look()
    assert first[0][0] is look()[0][0]  # unchanged: the same shared object
    pods = names(pods_of(cluster))
    runner.ready_pods.update(pods)
    cluster.advance()
    look()
    runner.exits[pods[0]] = 1
    cluster.advance()
    look()
    clock.advance(timedelta(seconds=10))
    cluster.advance()
    look()
    cluster.delete_pod(namespace=NS, name=pods[1])
    look()
    cluster.advance()
    after = look()
    assert after[0][0] is not first[0][0]
    assert after[0][0]["metadata"]["resourceVersion"] != first[0][0]["metadata"]["resourceVersion"]


def test_a_caller_changing_a_pods_last_state_does_not_change_the_cluster() -> None:
    runner = Runner(readiness=False)
    cluster, _ = one_node_cluster(runner=runner)
    serve(cluster, replicas=1)
    (pod,) = pods_of(cluster)
    runner.exits[pod["metadata"]["name"]] = 2
    cluster.advance()

    (copy,) = pods_of(cluster)
    serving_status(copy)["lastState"]["terminated"]["exitCode"] = 99
    copy["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] = 99

    (again,) = pods_of(cluster)
    assert serving_status(again)["lastState"]["terminated"]["exitCode"] == 2
    assert again["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
