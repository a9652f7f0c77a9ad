"""The functions' serving settings (core/settings.py ServingSettings), read like every other setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from squall.core.settings import SETTINGS_FILE_VARIABLE, ServingSettings, Settings

REGISTRIES = ["registry.example.com/squall"]
IMAGE = "registry.example.com/squall/tensorflow-serving:2.18.0"
FETCH = "registry.example.com/squall/tf-trainer@sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SQUALL_SERVING", "SQUALL_ALLOWED_REGISTRIES", SETTINGS_FILE_VARIABLE, "LAMBDA_TASK_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SQUALL_TABLE_NAME", "squall-jobs")


def test_serving_is_off_until_both_images_are_set() -> None:
    assert Settings().serving == ServingSettings()
    assert (
        Settings().serving.not_configured
        == "serving is not configured: set serving.image and serving.fetchImage"
    )
    only_image = Settings(allowed_registries=REGISTRIES, serving={"image": IMAGE, "fetchImage": ""})
    assert only_image.serving.fetch_image is None
    assert only_image.serving.not_configured is not None
    both = Settings(allowed_registries=REGISTRIES, serving={"image": IMAGE, "fetchImage": FETCH})
    assert both.serving.not_configured is None
    assert (both.serving.service_type, both.serving.load_balancer_scheme) == ("LoadBalancer", "internal")


def test_the_settings_file_holds_serving_as_the_stack_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = {
        "image": IMAGE,
        "fetchImage": FETCH,
        "serviceType": "ClusterIP",
        "loadBalancerScheme": "internet-facing",
    }
    path = tmp_path / "reconcile.json"
    path.write_text(json.dumps({"allowed_registries": REGISTRIES, "serving": serving}))
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(path))
    settings = Settings().serving
    assert (settings.image, settings.fetch_image) == (IMAGE, FETCH)
    assert (settings.service_type, settings.load_balancer_scheme) == ("ClusterIP", "internet-facing")


def test_a_variable_sets_serving_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUALL_ALLOWED_REGISTRIES", json.dumps(REGISTRIES))
    monkeypatch.setenv("SQUALL_SERVING", json.dumps({"image": IMAGE, "fetchImage": FETCH}))
    assert Settings().serving.image == IMAGE


@pytest.mark.parametrize(
    ("serving", "words"),
    [
        ({"image": "docker.io/tensorflow/serving:2.18.0", "fetchImage": FETCH}, "serving.image"),
        ({"image": IMAGE, "fetchImage": "registry.example.com/squallx/tf:1"}, "serving.fetchImage"),
        ({"image": "registry.example.com/squall/../x:1"}, "serving.image"),
        ({"image": "NOT AN IMAGE"}, "serving.image"),
        ({"image": "x" * 100_000}, "serving.image"),
        ({"image": 5}, "serving.image"),
        ({"serviceType": "NodePort"}, "serviceType"),
        ({"loadBalancerScheme": "public"}, "loadBalancerScheme"),
        ({"imag": IMAGE}, "imag"),
    ],
)
def test_a_bad_serving_setting_names_itself(serving: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(allowed_registries=REGISTRIES, serving=serving)
    assert words in str(caught.value)
    assert len(str(caught.value)) < 2_000


def test_serving_images_come_from_the_allowed_registries_like_job_images() -> None:
    with pytest.raises(ValidationError, match=r"allowed registry: registry\.example\.com/squall"):
        Settings(allowed_registries=REGISTRIES, serving={"image": "registry.example.com/other/tfs:1"})
    with pytest.raises(ValidationError, match=r"allowed registry: \(none configured\)"):
        Settings(serving={"image": IMAGE})
