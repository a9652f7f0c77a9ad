"""observe_serving (core/serving_status.py) on Deployment and pod status as the API server writes it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from squall.core.serving_status import observe_serving

MODEL_URI = "s3://squall-artifacts/teams/vision/outputs/mnist-0a1b2c3d"


def deployment(*, replicas: int = 2, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "model-mnist",
            "namespace": "team-vision",
            "generation": 1,
            "labels": {"app.kubernetes.io/managed-by": "squall", "squall.io/model-service": "mnist"},
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"squall.io/model-service": "mnist"}}},
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "unavailableReplicas": replicas,
            "conditions": conditions
            or [
                {
                    "type": "Available",
                    "status": "False",
                    "lastUpdateTime": "2026-12-01T10:00:00Z",
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                    "reason": "MinimumReplicasUnavailable",
                    "message": "Deployment does not have minimum availability.",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "lastUpdateTime": "2026-12-01T10:00:00Z",
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                    "reason": "ReplicaSetUpdated",
                    "message": 'ReplicaSet "model-mnist-7d9f8c6b5" is progressing.',
                },
            ],
        },
    }


def container_status(name: str, *, image: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": "PodInitializing"}},
        "lastState": {},
    } | fields


FETCH_IMAGE = "registry.example.com/squall/tf-trainer:1.4.0"
SERVING_IMAGE = "registry.example.com/squall/tensorflow-serving:2.18.0"


def pod(
    suffix: str = "x7k2p",
    *,
    init: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    ready: bool = False,
    phase: str = "Pending",
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"model-mnist-7d9f8c6b5-{suffix}",
        "namespace": "team-vision",
        "labels": {"squall.io/model-service": "mnist", "pod-template-hash": "7d9f8c6b5"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "model-mnist-7d9f8c6b5"}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T10:05:00Z"
        metadata["deletionGracePeriodSeconds"] = 30
    initialized = init is None or "terminated" in (init.get("state") or {})
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-12-01T10:00:02Z"},
        {
            "type": "Initialized",
            "status": "True" if initialized else "False",
            "lastTransitionTime": "2026-12-01T10:00:02Z",
        },
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": "2026-12-01T10:00:09Z",
        },
        {
            "type": "ContainersReady",
            "status": "True" if ready else "False",
            "lastTransitionTime": "2026-12-01T10:00:09Z",
        },
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"},
    ]
    if not ready:
        conditions[2] |= {
            "reason": "ContainersNotReady",
            "message": "containers with unready status: [serving]",
        }
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": "10.0.1.17",
        "podIP": "10.0.1.53",
        "qosClass": "Burstable",
        "startTime": "2026-12-01T10:00:00Z",
        "initContainerStatuses": [
            init
            or container_status(
                "fetch-model",
                image=FETCH_IMAGE,
                ready=True,
                state={
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": "2026-12-01T10:00:01Z",
                        "finishedAt": "2026-12-01T10:00:05Z",
                        "containerID": "containerd://aa",
                    }
                },
            )
        ],
        "containerStatuses": [server or container_status("serving", image=SERVING_IMAGE)],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {}, "status": status}


def serving_pod(suffix: str, **fields: Any) -> dict[str, Any]:
    running = container_status(
        "serving",
        image=SERVING_IMAGE,
        ready=True,
        started=True,
        state={"running": {"startedAt": "2026-12-01T10:00:06Z"}},
    )
    return pod(suffix, server=running, ready=True, phase="Running", **fields)


def test_ready_replicas_are_the_running_pods_whose_ready_condition_is_true() -> None:
    pods = [serving_pod("aaaaa"), pod("bbbbb", phase="Running")]
    assert observe_serving(deployment(), pods).ready == 1
    assert observe_serving(deployment(), pods).failure is None
    assert observe_serving(deployment(), [serving_pod("aaaaa"), serving_pod("ccccc")]).ready == 2


def test_a_pod_being_deleted_counts_for_nothing() -> None:
    pods = [serving_pod("aaaaa", deleting=True), serving_pod("bbbbb")]
    assert observe_serving(deployment(), pods).ready == 1


def test_ready_pods_of_a_rollout_never_count_beyond_the_replicas() -> None:
    pods = [serving_pod(s) for s in ("aaaaa", "bbbbb", "ccccc")]
    assert observe_serving(deployment(replicas=2), pods).ready == 2


def test_a_pending_service_has_neither_ready_replicas_nor_a_failure() -> None:
    observation = observe_serving(deployment(), [])
    assert (observation.ready, observation.failure) == (0, None)
    unscheduled = pod()
    unscheduled["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
        "qosClass": "Burstable",
    }
    assert observe_serving(deployment(), [unscheduled]) == observe_serving(deployment(), [])


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
@pytest.mark.parametrize("container", ["fetch-model", "serving"])
def test_an_image_that_cannot_be_pulled_fails_the_service(reason: str, container: str) -> None:
    message = f'Back-off pulling image "{SERVING_IMAGE}"'
    waiting = container_status(
        container, image=SERVING_IMAGE, state={"waiting": {"reason": reason, "message": message}}
    )
    stuck = pod(init=waiting) if container == "fetch-model" else pod(server=waiting)
    failure = observe_serving(deployment(), [serving_pod("aaaaa"), stuck]).failure
    assert failure is not None
    assert failure[0] == "ImagePullBackOff"
    assert container in failure[1]
    assert SERVING_IMAGE in failure[1]


def crash_looping_fetch(exit_code: int, *, restarts: int, message: str) -> dict[str, Any]:
    return container_status(
        "fetch-model",
        image=FETCH_IMAGE,
        restartCount=restarts,
        state={
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": "back-off 40s restarting failed container=fetch-model pod=model-mnist-7d9f8c6b5-x7k2p_team-vision(4f0c)",
            }
        },
        lastState={
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error",
                "message": message,
                "startedAt": "2026-12-01T10:01:00Z",
                "finishedAt": "2026-12-01T10:01:02Z",
                "containerID": "containerd://bb",
            }
        },
    )


def test_no_saved_model_is_model_not_found_from_the_last_state_of_a_restarting_fetch() -> None:
    message = f"no SavedModel at {MODEL_URI}: {MODEL_URI}/saved_model.pb does not exist"
    failing = pod(init=crash_looping_fetch(2, restarts=1, message=message))
    failure = observe_serving(deployment(), [failing]).failure
    assert failure is not None
    assert failure[0] == "ModelNotFound"
    assert MODEL_URI in failure[1]


def test_no_saved_model_is_model_not_found_on_its_first_exit_too() -> None:
    fetch = container_status(
        "fetch-model",
        image=FETCH_IMAGE,
        state={
            "terminated": {
                "exitCode": 2,
                "reason": "Error",
                "message": "no SavedModel at s3://b/k",
                "startedAt": "2026-12-01T10:00:01Z",
                "finishedAt": "2026-12-01T10:00:03Z",
            }
        },
    )
    failure = observe_serving(deployment(), [pod(init=fetch)]).failure
    assert failure is not None
    assert failure[0] == "ModelNotFound"


def test_the_server_exiting_2_is_model_not_found() -> None:
    server = container_status(
        "serving",
        image=SERVING_IMAGE,
        restartCount=1,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
        lastState={"terminated": {"exitCode": 2, "reason": "Error", "message": "no SavedModel at s3://b/k"}},
    )
    failure = observe_serving(deployment(), [pod(server=server, phase="Running")]).failure
    assert failure is not None
    assert failure[0] == "ModelNotFound"


def test_a_fetch_that_fails_otherwise_is_retried_until_it_has_restarted_three_times() -> None:
    flaky = pod(init=crash_looping_fetch(1, restarts=2, message="could not reach S3: timed out"))
    assert observe_serving(deployment(), [flaky]).failure is None
    spent = pod(init=crash_looping_fetch(1, restarts=3, message="could not reach S3: timed out"))
    failure = observe_serving(deployment(), [spent]).failure
    assert failure is not None
    assert failure[0] == "ModelLoadFailed"
    assert "restarted 3 times" in failure[1]
    assert "could not reach S3" in failure[1]


def test_a_server_that_cannot_load_the_model_is_model_load_failed() -> None:
    server = container_status(
        "serving",
        image=SERVING_IMAGE,
        restartCount=4,
        state={
            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}
        },
        lastState={
            "terminated": {
                "exitCode": 139,
                "reason": "Error",
                "startedAt": "2026-12-01T10:03:00Z",
                "finishedAt": "2026-12-01T10:03:04Z",
                "containerID": "containerd://cc",
            }
        },
    )
    failure = observe_serving(deployment(), [pod(server=server, phase="Running")]).failure
    assert failure == (
        "ModelLoadFailed",
        "pod model-mnist-7d9f8c6b5-x7k2p container serving restarted 4 times; last exit 139 (Error)",
    )


def test_an_oom_killed_server_is_model_load_failed_once_it_has_restarted_three_times() -> None:
    server = container_status(
        "serving",
        image=SERVING_IMAGE,
        restartCount=3,
        state={"running": {"startedAt": "2026-12-01T10:04:00Z"}},
        lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
    )
    failure = observe_serving(deployment(), [pod(server=server, phase="Running")]).failure
    assert failure is not None
    assert failure[0] == "ModelLoadFailed"
    assert "OOMKilled" in failure[1]


def test_the_deployment_giving_up_is_progress_deadline_exceeded() -> None:
    conditions = copy.deepcopy(deployment()["status"]["conditions"])
    conditions[1] = {
        "type": "Progressing",
        "status": "False",
        "lastUpdateTime": "2026-12-01T10:10:00Z",
        "lastTransitionTime": "2026-12-01T10:10:00Z",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "model-mnist-7d9f8c6b5" has timed out progressing.',
    }
    failure = observe_serving(deployment(conditions=conditions), [pod()]).failure
    assert failure == (
        "ProgressDeadlineExceeded",
        'ReplicaSet "model-mnist-7d9f8c6b5" has timed out progressing.',
    )


def test_a_progressing_condition_false_for_another_reason_is_no_failure() -> None:
    conditions = [
        {"type": "Progressing", "status": "False", "reason": "ReplicaSetCreateError", "message": "quota"}
    ]
    assert observe_serving(deployment(conditions=conditions), [pod()]).failure is None


def test_the_most_specific_failure_wins() -> None:
    # the fetch found no model and has restarted many times: ModelNotFound, not ModelLoadFailed
    failing = pod(init=crash_looping_fetch(2, restarts=9, message="no SavedModel at s3://b/k"))
    conditions = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "x"}
    ]
    failure = observe_serving(deployment(conditions=conditions), [failing]).failure
    assert failure is not None
    assert failure[0] == "ModelNotFound"


def test_a_failure_message_is_bounded() -> None:
    failing = pod(init=crash_looping_fetch(2, restarts=1, message="x" * 4096))
    failure = observe_serving(deployment(), [failing]).failure
    assert failure is not None
    assert len(failure[1]) < 400


def test_the_restarts_of_a_pod_being_deleted_are_history() -> None:
    failing = pod(init=crash_looping_fetch(1, restarts=5, message="boom"), deleting=True)
    assert observe_serving(deployment(), [failing, serving_pod("aaaaa")]).failure is None
