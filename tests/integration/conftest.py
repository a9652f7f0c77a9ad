"""Wiring for service tests: the DynamoDB store on moto, the simulated cluster, a virtual clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from squall import runtime
from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.kubernetes.cluster import KubernetesCluster
from squall.adapters.kubernetes.eks_auth import build_api_client
from squall.core.codepack import pack
from squall.core.settings import Settings
from squall.core.telemetry import RecordingMetrics
from squall.local.aws import create_table
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.runtime import LocalScaleRequests
from squall.planner import Policy
from squall.ports import JobStore
from squall.services.admission import Admitter
from squall.services.intake import Intake, IntakeConfig
from squall.services.reconcile import Reconciler
from tests.job_records import StepReport

from .kube_server import KubeApi, running_kube_api

TEAMS = {"research": "team-research", "vision": "team-vision"}
REGISTRIES = ["registry.example.com/squall"]
IMAGE = "registry.example.com/squall/tf-trainer:1.0"

GPU_NODE = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}


def _intake(
    *,
    store: JobStore,
    cluster: SimulatedCluster,
    clock: VirtualClock,
    metrics: RecordingMetrics,
    **config: Any,
) -> Intake:
    """The intake of the test teams and registries; `config` sets the rest of its IntakeConfig."""
    return Intake(
        store=store,
        clusters={"local": cluster},
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams=TEAMS, registries=REGISTRIES, **config),
    )


@dataclass
class World:
    clock: VirtualClock
    store: JobStore
    cluster: SimulatedCluster
    metrics: RecordingMetrics
    intake: Intake
    reconciler: Reconciler

    @classmethod
    def over(cls, store: JobStore, *, run_for: timedelta = timedelta(minutes=3)) -> World:
        """The intake and reconcile over `store` and a simulated cluster with no nodes, whose pods
        run for `run_for`."""
        clock = VirtualClock()
        cluster = SimulatedCluster(clock=clock, default_run_for=run_for)
        metrics = RecordingMetrics(clock)
        intake = _intake(store=store, cluster=cluster, clock=clock, metrics=metrics)
        reconciler = Reconciler(
            store=store, clusters={"local": cluster}, clock=clock, metrics=metrics, intake=intake
        )
        return cls(clock, store, cluster, metrics, intake, reconciler)

    def admit(self) -> None:
        """Let the jobs that fit run, as the scale check's admission does (no fleet to plan for here)."""
        admitter = Admitter(
            clusters={"local": self.cluster},
            metrics=self.metrics,
            teams={},
            policy=Policy(),
            store=self.store,
        )
        admitter.run(now=self.clock.now(), outcome=StepReport())

    def new_intake(self, **config: Any) -> Intake:
        """A fresh intake, as each Lambda invocation builds one; `config` as for IntakeConfig."""
        return _intake(
            store=self.store, cluster=self.cluster, clock=self.clock, metrics=self.metrics, **config
        )

    def add_gpu_nodes(self, count: int = 2, region: str = "us-west-2") -> None:
        for i in range(count):
            self.cluster.add_node(
                name=f"gpu-{region}-{i}",
                allocatable=GPU_NODE,
                labels={"topology.kubernetes.io/region": region},
                taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                provider_id=f"aws:///{region}a/i-{region[-1]}{i:016d}",
            )

    def run(self, minutes: int) -> None:
        """Admit, let the cluster run and reconcile every minute, as the schedules do."""
        for _ in range(minutes):
            self.admit()
            self.clock.advance(timedelta(minutes=1))
            self.cluster.advance()
            self.reconciler.run()


@pytest.fixture
def jobs_table(aws_credentials: None) -> Iterator[Any]:
    """moto's DynamoDB client with Squall's job table, "jobs" (the scale state and drains live in it too)."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_table(client, "jobs")
        yield client


@pytest.fixture
def world(jobs_table: Any) -> World:
    return World.over(DynamoJobStore(jobs_table, "jobs"))


ARTIFACTS_BUCKET = "squall-artifacts"


@pytest.fixture
def installed(world: World) -> Iterator[LocalScaleRequests]:
    """The world's services installed for the Lambda handlers; the scale checks they request."""
    requests = LocalScaleRequests(clock=world.clock)
    runtime.install(
        runtime.Services(
            settings=Settings(table_name="jobs", teams=TEAMS, allowed_registries=REGISTRIES),
            clock=world.clock,
            store=world.store,
            clusters={"local": world.cluster},
            metrics=world.metrics,
            scale_requests=requests,
        )
    )
    yield requests
    runtime.install(None)


@pytest.fixture
def s3(aws_credentials: None) -> Iterator[Any]:
    """moto's S3 with the artifacts bucket (the code archives' tests)."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(
            Bucket=ARTIFACTS_BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        yield client


@pytest.fixture
def archive(tmp_path: Path) -> Any:
    """A packed code archive of one train.py (the code archives' tests)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('train')\n")
    return pack(code, tmp_path / "code.tar.gz")


@pytest.fixture
def kube() -> Iterator[KubeApi]:
    """The Kubernetes API stand-in (kmock), fresh per test: it starts in milliseconds, and no state leaks."""
    with running_kube_api() as (_, api):
        yield api


@pytest.fixture
def api_client(kube: KubeApi) -> Iterator[Any]:
    """The official client's ApiClient pointed at the stand-in."""
    client = build_api_client(host=kube.url)
    yield client
    client.close()


@pytest.fixture
def cluster(api_client: Any) -> KubernetesCluster:
    """The Kubernetes adapter over the stand-in, with short request timeouts."""
    return KubernetesCluster(api_client, request_timeout=(2.0, 5.0))
