"""After training, serve the model (issue 15), end to end on the local runtime.

The worker trains one replica for a few steps as a local process (as in
test_researcher_loop.py, on a wall clock with real pods) and exports its SavedModel to
the local artifacts bucket; `squall serve JOB --wait` sends the serve message, the
submit function renders the model service's Deployment, the simulated cluster's
Deployment controller makes its pod and the pod runner starts the stand-in server
(local/model_server.py) on loopback ports; reconcile records SERVING with the
endpoints. `squall predict` (REST, then --grpc) must answer what the SavedModel's
serving signature answers when called directly on the same input; an input that does
not match the signature is a clear error and exit 1. `squall unserve` stops it and its
objects go.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from squall.cli import main
from squall.local.aws import client
from squall.local.runtime import LocalRuntime
from tests.e2e.test_researcher_loop import BUCKET, CODE, EXAMPLE, ROOT, Driver, real_pods_runtime, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOB_ID = "gan-serve"  # also the model service's name (the default)
LATENT_DIM = 8  # the example's --latent-dim
MODEL_PREFIX = f"teams/research/models/{JOB_ID}/"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The quickstart's example with one replica and the fewest steps."""
    body = yaml.safe_load(EXAMPLE.read_text())
    args = list(body["args"])
    for flag, value in (("--steps", 4), ("--checkpoint-every", 2), ("--log-every", 2), ("--image-every", 4)):
        args[args.index(flag) + 1] = str(value)
    args[args.index("--eval-samples") + 1] = "16"
    assert args[args.index("--latent-dim") + 1] == str(LATENT_DIM)
    body = {key: value for key, value in body.items() if key != "replicas"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body | {"id": JOB_ID, "args": args, "retries": 0}))
    return path


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalRuntime, Driver]]:
    with real_pods_runtime(tmp_path) as running:
        yield running


def signature_answer(endpoint: str, noise: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The exported SavedModel's serving signature called directly (tf.saved_model.load) on `noise`."""
    import tensorflow as tf

    s3 = client("s3", endpoint)
    target = tmp_path / "saved"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=MODEL_PREFIX)
    for obj in (o for page in pages for o in page.get("Contents", [])):
        path = target / obj["Key"][len(MODEL_PREFIX) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(BUCKET, obj["Key"], str(path))
    serving = tf.saved_model.load(str(target)).signatures["serving_default"]
    answer: np.ndarray = serving(noise=tf.constant(noise))["images"].numpy()
    return answer


def predict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: Any, *flags: str
) -> tuple[int, Any, str]:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(body))
    code = main(["predict", JOB_ID, "--input", str(request), *flags])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else None, captured.err


def example_client() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("predict_client", ROOT / "examples" / "predict_client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records_now(runtime: LocalRuntime) -> Any:
    """The model service's record, as the CLI reads it (the local endpoint's jobs table)."""
    from squall.adapters.aws.model_service_store import DynamoModelServiceStore

    resources = runtime.resources
    service = DynamoModelServiceStore(client("dynamodb", resources.endpoint), resources.table_name).get(
        JOB_ID
    )
    assert service is not None and service.rest_url and service.grpc_target
    return service


def test_train_serve_predict_rest_and_grpc_then_unserve(
    local: tuple[LocalRuntime, Driver], spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime, driver = local

    # given a job trained for a few steps, its SavedModel exported to the local S3
    assert main(["submit", str(spec), "--code", CODE, "--watch"]) == 0, capsys.readouterr().out
    assert not driver.errors, driver.errors
    capsys.readouterr()

    # when it is served, followed until SERVING
    code = main(["serve", JOB_ID, "--wait", "--timeout", "600"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{JOB_ID} SERVING (1/1 ready): REST http://127.0.0.1:" in out
    assert main(["services"]) == 0
    listed = capsys.readouterr().out
    assert any(line.split()[:2] == [JOB_ID, "SERVING"] for line in listed.splitlines()), listed

    # then REST predict answers what the serving signature answers
    noise = np.random.default_rng(7).normal(size=(3, LATENT_DIM)).astype(np.float32)
    expected = signature_answer(runtime.resources.endpoint, noise, tmp_path)
    code, answer, err = predict(capsys, tmp_path, {"instances": noise.tolist()})
    assert code == 0, err
    np.testing.assert_allclose(
        np.array(answer["predictions"], dtype=np.float32), expected, rtol=1e-5, atol=1e-6
    )
    code, answer, err = predict(capsys, tmp_path, {"inputs": {"noise": noise.tolist()}})
    assert code == 0, err
    np.testing.assert_allclose(np.array(answer["outputs"], dtype=np.float32), expected, rtol=1e-5, atol=1e-6)

    # and so does gRPC predict
    code, answer, err = predict(capsys, tmp_path, {"instances": noise.tolist()}, "--grpc")
    assert code == 0, err
    np.testing.assert_allclose(np.array(answer["outputs"], dtype=np.float32), expected, rtol=1e-5, atol=1e-6)

    # the example client (examples/predict_client.py) gets the same answer both ways
    client_module = example_client()
    service = records_now(runtime)
    rows = noise.tolist()
    np.testing.assert_allclose(
        np.array(client_module.predict_rest(service.rest_url, JOB_ID, rows), dtype=np.float32),
        expected,
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        np.array(client_module.predict_grpc(service.grpc_target, JOB_ID, rows), dtype=np.float32),
        expected,
        rtol=1e-5,
        atol=1e-6,
    )

    # an input that does not match the signature: a clear error, exit 1
    wrong = {"instances": [[1.0, 2.0, 3.0]]}
    code, _, err = predict(capsys, tmp_path, wrong)
    assert code == 1 and ":predict: HTTP 400: " in err, err
    code, _, err = predict(capsys, tmp_path, wrong, "--grpc")
    assert (
        code == 1
        and f"input 'noise': shape (1, 3) does not match the signature's (None, {LATENT_DIM})" in err
    )

    # the history, then unserve: STOPPED and its objects gone
    assert main(["describe", JOB_ID, "--json"]) == 0
    history = json.loads(capsys.readouterr().out)["modelService"]
    assert [e["status"] for e in history["events"]][-1] == "SERVING"
    assert main(["unserve", JOB_ID]) == 0
    from squall.adapters.aws.model_service_store import DynamoModelServiceStore

    resources = runtime.resources
    records = DynamoModelServiceStore(client("dynamodb", resources.endpoint), resources.table_name)
    until(
        lambda: (s := records.get(JOB_ID)) is not None and s.status.value == "STOPPED",
        seconds=120,
    )
    until(lambda: not driver.call(lambda rt: rt.cluster.list_deployments(model_service=JOB_ID)), seconds=120)
    until(
        lambda: (
            not driver.call(
                lambda rt: rt.cluster.list_model_service_pods(namespace="team-research", model_service=JOB_ID)
            )
        ),
        seconds=120,
    )
    assert not driver.errors, driver.errors
