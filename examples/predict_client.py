"""Call a Squall model service from Python: TensorFlow Serving's REST API, or its gRPC API.

    python examples/predict_client.py http://HOST:8501 gan-local            # REST
    python examples/predict_client.py HOST:8500 gan-local --grpc           # gRPC

`squall services` prints the endpoints (REST and gRPC); `kubectl port-forward
svc/<name>-model 8501 8500 -n <team namespace>` reaches them from outside the VPC. The
model here is the example trainer's generator: `serving_default` takes `noise`
(batch, latent_dim) float32 and answers `images`. The REST half needs only the
standard library; the gRPC half needs `tensorflow-serving-api` (and TensorFlow).
"""

from __future__ import annotations

import json
import random
import sys
import urllib.request


def predict_rest(url: str, name: str, instances: list[list[float]]) -> list[object]:
    body = json.dumps({"instances": instances}).encode()
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/models/{name}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # an HTTP 400 says why in its body
        return list(json.load(response)["predictions"])


def predict_grpc(target: str, name: str, instances: list[list[float]]) -> object:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = "serving_default"
    request.inputs["noise"].CopyFrom(tf.make_tensor_proto(instances, dtype=tf.float32))
    with grpc.insecure_channel(target) as channel:
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
    return tf.make_ndarray(response.outputs["images"]).tolist()


if __name__ == "__main__":
    endpoint, model = sys.argv[1], sys.argv[2]
    latent_dim = 8  # the example job's --latent-dim
    noise = [[random.gauss(0, 1) for _ in range(latent_dim)] for _ in range(2)]
    images = (
        predict_grpc(endpoint, model, noise) if "--grpc" in sys.argv else predict_rest(endpoint, model, noise)
    )
    print(json.dumps(images)[:400], "...")
