"""A job's objects and a model service's never share a name in a team namespace.

They did: job ``model-x``'s worker 0 and model service ``x-worker-0`` were both the
Service ``model-x-worker-0``. Now a job's object names end in its replica index (a
digit) and a model service's in ``-model`` (a letter): disjoint by their shape,
whatever names the two grammars let through.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from squall.conventions import JOB_ID_LABEL, MANAGED_BY_LABEL, MODEL_SERVICE_LABEL
from squall.core import manifests, serving
from squall.core.spec import (
    MAX_REPLICAS,
    MAX_TRIAL_ID_LENGTH,
    Replica,
    ReplicaResources,
    ReplicaType,
    is_service_name,
)
from squall.core.spec.limits import DNS_LABEL

# Every id a job can have (trial ids are the longest) and every model service name.
job_ids = st.from_regex(DNS_LABEL, fullmatch=True).filter(lambda v: len(v) <= MAX_TRIAL_ID_LENGTH)
service_names = st.from_regex(DNS_LABEL, fullmatch=True).filter(is_service_name)
replicas = st.sampled_from(list(ReplicaType)).flatmap(
    lambda kind: st.builds(
        Replica,
        type=st.just(kind.value),
        index=st.integers(0, MAX_REPLICAS[kind.value] - 1),
        resources=st.just(ReplicaResources()),
    )
)


@given(job_id=job_ids, replica=replicas, name=service_names)
def test_no_job_object_is_named_as_a_model_service_object(job_id: str, replica: Replica, name: str) -> None:
    job_object = manifests.object_name(job_id, replica)
    model_object = serving.object_name(name)
    assert job_object != model_object
    assert job_object[-1].isdigit() and not model_object[-1].isdigit()


@given(name=service_names)
def test_a_model_service_object_name_is_a_service_name_kubernetes_takes(name: str) -> None:
    # DNS-1035 (a Service's name): a letter first, at most 63; the pods' generated names
    # (<deployment>-<10>-<5>) stay within 63 too.
    object_name = serving.object_name(name)
    assert DNS_LABEL.fullmatch(object_name) and len(object_name) + 17 <= 63


def test_the_collision_found_by_fuzzing_is_gone() -> None:
    worker = Replica(type="worker", index=0, resources=ReplicaResources())
    assert manifests.object_name("model-x", worker) == "model-x-worker-0"
    assert serving.object_name("x-worker-0") == "x-worker-0-model"


def _obj(labels: dict[str, str]) -> dict[str, object]:
    return {"kind": "Service", "metadata": {"name": "n", "namespace": "ns", "labels": labels}}


def test_an_object_is_that_jobs_or_services_only_when_every_owner_label_agrees() -> None:
    job = {MANAGED_BY_LABEL: "squall", JOB_ID_LABEL: "model-x", "squall.io/replica-type": "worker"}
    job |= {"squall.io/replica-index": "0"}
    model = {MANAGED_BY_LABEL: "squall", MODEL_SERVICE_LABEL: "x-worker-0"}
    assert manifests.owned_alike(_obj(job), _obj(job | {"other": "label"}))
    assert manifests.owned_alike(_obj(model), _obj(model | {"squall.io/team": "research"}))
    assert not manifests.owned_alike(_obj(job), _obj(model))
    assert not manifests.owned_alike(_obj(model), _obj(job))
    assert not manifests.owned_alike(_obj(job), _obj(job | {"squall.io/replica-index": "1"}))
    assert not manifests.owned_alike(_obj(job), _obj({}))
    assert not manifests.owned_alike(_obj(model), _obj({MODEL_SERVICE_LABEL: "x-worker-0"}))


def test_a_taken_name_says_whose_it_is_and_that_squall_leaves_it() -> None:
    job = {MANAGED_BY_LABEL: "squall", JOB_ID_LABEL: "model-x", "squall.io/replica-type": "worker"}
    job |= {"squall.io/replica-index": "0"}
    model = {MANAGED_BY_LABEL: "squall", MODEL_SERVICE_LABEL: "x-worker-0"}
    text = manifests.name_taken(_obj(job), _obj(model))
    assert text.startswith("Service ns/n exists already and belongs to model service 'x-worker-0',")
    assert "not to job 'model-x' (worker-0)" in text and "neither adopts nor deletes it" in text
    assert "belongs to no Squall job or model service" in manifests.name_taken(
        _obj(model), _obj({"app": "a"})
    )
