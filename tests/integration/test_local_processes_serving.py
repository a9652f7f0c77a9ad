"""ProcessRunner runs a model service's pod as one local process: the TensorFlow Serving stand-in.

The pods are the Deployment's pod template as core/serving_manifests.py renders it, so
the runner reads the containers production renders. The process tests run the
stand-in for real against moto's server (the local endpoint), with a small SavedModel
in its artifacts bucket.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from squall.conventions import MODEL_SERVICE_LABEL
from squall.core.serving import ModelService, ServiceStatus
from squall.core.serving_manifests import render_model_service
from squall.core.settings import ServingSettings
from squall.local.processes import ProcessRunner, ServingPod, serving_pod

if TYPE_CHECKING:
    from tests.local_pod_processes import LocalProcesses

NS = "team-research"
SETTINGS = ServingSettings(
    image="123456789012.dkr.ecr.us-west-2.amazonaws.com/tensorflow/serving:2.18.0",
    fetch_image="123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer:1.0",
)
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def service(
    name: str = "digits",
    *,
    model_uri: str = "s3://squall-artifacts/teams/research/out/job-1",
    version: int = 2,
) -> Any:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    return ModelService(
        name=name, team="research", namespace=NS, job_id="job-1", model_uri=model_uri, model_version=version,
        replicas=1, gpus=0, cpu="1", memory="2Gi", status=ServiceStatus.DEPLOYING, reason="Requested",
        created_at=now, updated_at=now,
    )  # fmt: skip


def pod_of(model_service: Any, *, suffix: str = "abcde") -> dict[str, Any]:
    """A pod of the rendered Deployment, as the simulated cluster's Deployment controller makes it."""
    deployment = next(
        o for o in render_model_service(model_service, settings=SETTINGS) if o["kind"] == "Deployment"
    )
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-7d4f9-{suffix}",
            "namespace": NS,
            "uid": str(uuid.uuid4()),
            "labels": dict(template["metadata"]["labels"]),
        },
        "spec": {**template["spec"], "nodeName": "ip-10-0-0-1"},
        "status": {"phase": "Pending"},
    }


def test_a_rendered_model_service_pod_is_read_for_the_stand_in() -> None:
    pod = pod_of(service(model_uri="s3://b/teams/research/out/job-1", version=7))

    assert serving_pod(pod) == ServingPod(
        source="s3://b/teams/research/out/job-1",
        model_name="digits",
        model_version=7,
        rest_container_port=8501,
        grpc_container_port=8500,
    )


@pytest.mark.parametrize(
    "spoil",
    [
        lambda pod: pod["metadata"]["labels"].pop(MODEL_SERVICE_LABEL),
        lambda pod: pod["spec"].pop("initContainers"),
        lambda pod: pod["spec"]["initContainers"][0].update(name="other"),
        lambda pod: pod["spec"]["containers"][0].update(name="main"),
        lambda pod: pod["spec"]["initContainers"][0].update(
            args=["--source", "s3://b/x", "--target", "/models/d/x"]
        ),
        # a target outside the pod's models volume would land outside the pod's directory
        lambda pod: pod["spec"]["initContainers"][0].update(
            args=["--source", "s3://b/x", "--target", "/models/../../escaped/1"]
        ),
        lambda pod: pod["spec"]["containers"][0].update(args=["--port=8500"]),
    ],
)
def test_a_pod_not_as_the_contract_renders_it_is_not_a_model_service_pod(spoil: Any, tmp_path: Path) -> None:
    pod = pod_of(service())
    spoil(pod)

    assert serving_pod(pod) is None
    runner = ProcessRunner(endpoint="http://127.0.0.1:9", log_group="g", work_dir=tmp_path, logs_client=None)
    try:
        assert not runner.runs(pod)  # its images are not worker images either
    finally:
        runner.close(wait=1)


def test_a_model_service_pod_is_run_whatever_its_serving_image(tmp_path: Path) -> None:
    runner = ProcessRunner(endpoint="http://127.0.0.1:9", log_group="g", work_dir=tmp_path, logs_client=None)
    try:
        assert runner.runs(pod_of(service()))
        assert runner.ports(pod_of(service())) is None  # not started
        assert not runner.ready(pod_of(service()))
    finally:
        runner.close(wait=1)


# ---- for real ----


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tf = pytest.importorskip("tensorflow")

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            return {"y": x * 2.0 + 1.0}

    path = tmp_path_factory.mktemp("export") / "job-1"
    module = Doubler()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


class World:
    def __init__(self, processes: LocalProcesses) -> None:
        from squall.local.aws import ARTIFACTS_BUCKET, LOG_GROUP, client

        self.bucket = ARTIFACTS_BUCKET
        self.s3 = client("s3", processes.endpoint)
        self.logs = processes.logs
        self.log_group = LOG_GROUP
        self.runner = processes.runner

    def upload(self, directory: Path, prefix: str) -> str:
        for path in directory.rglob("*"):
            if path.is_file():
                self.s3.upload_file(
                    str(path), self.bucket, f"{prefix}/{path.relative_to(directory).as_posix()}"
                )
        return f"s3://{self.bucket}/{prefix}"

    def until_ready_or_exited(self, pod: dict[str, Any]) -> int | None:
        """Asks as the simulated cluster does, until the pod is ready (None) or has exited (its code).

        Bounded by the test's timeout, never asserted on."""
        while True:
            if self.runner.ready(pod):
                return None
            code = self.runner.poll(pod)
            if code is not None:
                return code
            time.sleep(0.2)

    def lines(self, pod_name: str) -> list[str]:
        streams = self.logs.describe_log_streams(logGroupName=self.log_group)["logStreams"]
        found = []
        for stream in streams:
            if f"{pod_name}_{NS}_serving-" in stream["logStreamName"]:
                events = self.logs.get_log_events(
                    logGroupName=self.log_group, logStreamName=stream["logStreamName"], startFromHead=True
                )["events"]
                found.extend(json.loads(e["message"])["log"] for e in events)
        return found


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    from tests.local_pod_processes import local_processes

    with local_processes(tmp_path / "pods") as processes:
        yield World(processes)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_model_service_pod_serves_its_saved_model_on_the_ports_it_reports(
    world: World, saved_model: Path
) -> None:
    import tensorflow as tf

    uri = world.upload(saved_model, "teams/research/out/job-1")
    pod = pod_of(service(model_uri=uri, version=2))

    # when the runner starts it and the cluster asks until it is ready
    assert world.runner.start(pod)
    ports = world.runner.ports(pod)
    assert ports is not None and set(ports) == {8500, 8501} and ports[8500] != ports[8501]
    assert world.until_ready_or_exited(pod) is None

    # then the REST port it reports answers predict as the SavedModel does
    x = np.float32([[1.0, 2.0], [3.5, -4.0]])
    request = urllib.request.Request(
        f"http://127.0.0.1:{ports[8501]}/v1/models/digits/versions/2:predict",
        data=json.dumps({"instances": x.tolist()}).encode(),
    )
    with OPENER.open(request, timeout=30) as response:
        answer = json.loads(response.read())
    expected = tf.saved_model.load(str(saved_model)).signatures["serving_default"](x=tf.constant(x))["y"]
    np.testing.assert_array_equal(np.float32(answer["predictions"]), expected.numpy())

    # and when it is stopped, it exits and its output reaches the serving container's stream
    world.runner.stop(pod)
    while world.runner.running():
        time.sleep(0.2)
    assert any("serving model digits version 2" in line for line in world.lines(pod["metadata"]["name"]))
    assert not world.runner.ready(pod) and world.runner.ports(pod) is None


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_model_service_pod_without_a_saved_model_exits_2(world: World) -> None:
    pod = pod_of(
        service(model_uri=f"s3://{world.bucket}/teams/research/out/job-9", version=1), suffix="zzzzz"
    )

    assert world.runner.start(pod)
    code = world.until_ready_or_exited(pod)

    assert code == 2
    assert any("no SavedModel at" in line for line in world.lines(pod["metadata"]["name"]))
