"""Settings of the functions, read from the environment once per process.

Every function gets the same ``SQUALL_*`` variables from the CDK stack; complex
values are JSON. ``runtime.py`` reads them at cold start, so a misconfigured
function fails on its first invocation with a message naming the variable,
instead of half-way through a batch.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ClusterSettings(BaseModel):
    """How the functions reach the Kubernetes API."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    endpoint: str = ""
    certificate_authority: str = ""  # base64 PEM, as EKS DescribeCluster returns it
    region: str = ""


class PolicySettings(BaseModel):
    """Planner and drain policy (cdk.json context ``policy``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    provision_timeout: timedelta = Field(default=timedelta(minutes=10), alias="provisionTimeout")
    idle_threshold: timedelta = Field(default=timedelta(minutes=10), alias="idleThreshold")
    boot_grace: timedelta = Field(default=timedelta(minutes=5), alias="bootGrace")
    max_scale_down_fraction: float = Field(default=0.2, alias="maxScaleDownFraction", gt=0, le=1)
    backoff_base: timedelta = Field(default=timedelta(minutes=5), alias="backoffBase")
    backoff_max: timedelta = Field(default=timedelta(minutes=30), alias="backoffMax")
    drain_deadline: timedelta = Field(default=timedelta(minutes=30), alias="drainDeadline")
    drain_step_delay: timedelta = Field(default=timedelta(seconds=30), alias="drainStepDelay")
    job_ttl_after_finished: timedelta = Field(
        default=timedelta(hours=1), alias="jobTtlAfterFinished"
    )
    scale_check_debounce: timedelta = Field(default=timedelta(seconds=2), alias="scaleCheckDebounce")
    # The longest maxRuntime a job spec may ask for (operator policy).
    max_runtime_limit: timedelta = Field(default=timedelta(days=30), alias="maxRuntimeLimit", gt=timedelta(0))


class Settings(BaseSettings):
    """Environment of every Squall function (prefix ``SQUALL_``)."""

    model_config = SettingsConfigDict(env_prefix="SQUALL_", extra="ignore")

    table_name: str
    jobs_queue_url: str = ""
    drain_queue_url: str = ""
    event_bus_name: str = "default"
    # team -> Kubernetes namespace
    teams: dict[str, str] = Field(default_factory=lambda: {"research": "team-research"})
    allowed_registries: list[str] = Field(default_factory=list)
    regions: list[str] = Field(default_factory=list)
    node_groups: list[dict[str, Any]] = Field(default_factory=list)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    dry_run: bool = False
    # Squall's own lifecycle hooks (names) on the groups it manages
    launch_hook_name: str = "squall-launch"
    terminate_hook_name: str = "squall-terminate"
