"""Model service commands on the jobs queue: serve a finished job's SavedModel, unserve it.

Strict like the job spec (unknown fields are errors, every bound explicit) and built
from its parts: names are the spec's DNS labels, cpu and memory its quantities with
its bounds (`ReplicaResources`). Whether the job can be served (it succeeded, its
SavedModel exists, the name is free) is `core/serving_requests.py`'s question.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from squall.core import serving
from squall.core.spec import limits
from squall.core.spec.model import ReplicaResources, _dns_label, _field_error, _Model, between

MAX_SERVING_REPLICAS = 20
MAX_SERVING_GPUS = 8  # per replica
MAX_MODEL_VERSION = 1_000_000
MAX_REASON_LENGTH = 512


class ServeResources(ReplicaResources):
    """What one serving replica asks for: the job spec's quantities and bounds, fewer GPUs."""

    memory: str = "2Gi"
    gpu: Annotated[int, between(0, MAX_SERVING_GPUS)] = 0


def service_name(value: str, *, what: str = "name") -> str:
    """A model service name: a DNS label of at most serving.MAX_NAME_LENGTH, or ValueError."""
    return _dns_label(value, what=what, max_length=serving.MAX_NAME_LENGTH)


def is_service_name(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= serving.MAX_NAME_LENGTH
        and limits.DNS_LABEL.fullmatch(value) is not None
    )


class ServeCommand(_Model):
    """``{"action": "serve", "job": ..., "name": ..., "modelVersion": 1, "replicas": 1, "resources": {...}}``.

    ``name`` defaults to the job id when that is a valid name; otherwise it must be given.
    """

    action: Literal["serve"]
    job: str
    name: str = ""
    model_version: Annotated[int, between(1, MAX_MODEL_VERSION)] = 1
    replicas: Annotated[int, between(1, MAX_SERVING_REPLICAS)] = 1
    resources: ServeResources = Field(default_factory=ServeResources)

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "name" not in data and is_service_name(data.get("job")):
            return {**data, "name": data["job"]}
        return data

    @field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        return _dns_label(value, what="job", max_length=limits.MAX_TRIAL_ID_LENGTH)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return service_name(value)

    @model_validator(mode="after")
    def _named(self) -> ServeCommand:
        if not self.name:  # not given, and the job id is not a valid name
            raise _field_error(
                ("name",),
                f"is required: the job id {self.job!r} is not a valid model service name "
                f"(a DNS label of at most {serving.MAX_NAME_LENGTH} characters, starting with a letter)",
            )
        return self


class UnserveCommand(_Model):
    """``{"action": "unserve", "name": ..., "reason": ...}``."""

    action: Literal["unserve"]
    name: str
    reason: Annotated[str, Field(max_length=MAX_REASON_LENGTH)] = "requested by user"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return service_name(value)
