"""Wiring for the model service tests: the stores on moto, SavedModels on moto's S3, a clock.

`ServingWorld` holds an intake and a serving reconciler over one cluster: the simulated
cluster where it runs Deployments, or `StandInCluster`, a small ServingCluster that keeps
the objects it is given and reports what a test tells it (pods, Service status), and can
be told to refuse a kind of object.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3
from moto import mock_aws

from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.aws.model_service_store import DynamoModelServiceStore
from squall.adapters.aws.saved_models import S3SavedModels
from squall.conventions import MODEL_SERVICE_LABEL
from squall.core.errors import NotFoundError, PermanentError
from squall.core.jobs import Job, JobStatus, Reason, new_job, transition
from squall.core.serving import ModelService, ServiceEvent
from squall.core.settings import ServingSettings
from squall.core.telemetry import RecordingMetrics
from squall.local.aws import create_table
from squall.local.clock import VirtualClock
from squall.ports import KubeObject
from squall.services.intake import Intake, IntakeConfig
from squall.services.serving import ModelServing, ServingReconciler
from tests.serving_records import first_record

TEAMS = {"research": "team-research", "vision": "team-vision"}
REGISTRIES = ["registry.example.com/squall"]
SETTINGS = ServingSettings(
    image="registry.example.com/squall/tensorflow-serving:2.16.1",
    fetch_image="registry.example.com/squall/tf-trainer:1.0",
)
BUCKET = "models"
OUTPUT_URI = f"s3://{BUCKET}/teams/research/out"


def serve(job: str, **fields: Any) -> dict[str, Any]:
    return {"action": "serve", "job": job} | fields


def a_service(
    name: str, *, at: datetime, team: str = "research", job_id: str = "train-1"
) -> tuple[ModelService, ServiceEvent]:
    """A first (DEPLOYING) record of one replica serving the job's model from the team's prefix, and its event."""
    return first_record(
        name,
        at=at,
        team=team,
        job_id=job_id,
        namespace=TEAMS[team],
        model_uri=f"s3://{BUCKET}/teams/{team}/out/{job_id}",
    )


class StandInCluster:
    """A ServingCluster keeping objects by (kind, namespace, name); what it reports, a test sets."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], KubeObject] = {}
        self.pods: dict[tuple[str, str], list[KubeObject]] = {}  # (namespace, service) -> pods
        self.refuse: set[str] = set()  # kinds whose creation the "API server" refuses
        self.calls: list[str] = []

    def create(self, manifest: KubeObject) -> bool:
        kind, metadata = manifest["kind"], manifest["metadata"]
        self.calls.append(f"create {kind}")
        if kind in self.refuse:
            raise PermanentError(f"admission webhook denied the {kind} {metadata['name']}")
        key = (kind, metadata["namespace"], metadata["name"])
        if key in self.objects:
            return False
        self.objects[key] = manifest
        return True

    def list_deployments(
        self, *, namespace: str | None = None, model_service: str | None = None
    ) -> list[KubeObject]:
        return [
            obj
            for (kind, ns, _), obj in sorted(self.objects.items())
            if kind == "Deployment"
            and namespace in (None, ns)
            and model_service in (None, obj["metadata"]["labels"].get(MODEL_SERVICE_LABEL))
        ]

    def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[KubeObject]:
        return list(self.pods.get((namespace, model_service), []))

    def get_service(self, *, namespace: str, name: str) -> KubeObject | None:
        return self.objects.get(("Service", namespace, name))

    def delete_model_service_objects(self, *, namespace: str, model_service: str) -> int:
        self.calls.append(f"delete {namespace}/{model_service}")
        gone = [
            key
            for key, obj in self.objects.items()
            if key[1] == namespace
            and obj["metadata"].get("labels", {}).get(MODEL_SERVICE_LABEL) == model_service
        ]
        for key in gone:
            del self.objects[key]
        self.pods.pop((namespace, model_service), None)
        return len(gone)

    def of(self, name: str) -> list[str]:
        """The kinds of the objects of one model service, sorted."""
        return sorted(
            k
            for (k, _, _), o in self.objects.items()
            if o["metadata"]["labels"].get(MODEL_SERVICE_LABEL) == name
        )

    # what intake's job path would ask; the model service tests never get there
    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        raise NotFoundError("the stand-in cluster has no jobs")


@dataclass
class ServingWorld:
    clock: VirtualClock
    jobs: DynamoJobStore
    services: DynamoModelServiceStore
    s3: Any
    cluster: Any  # StandInCluster or SimulatedCluster
    metrics: RecordingMetrics
    serving: ModelServing
    submitters: dict[str, frozenset[str]] = field(default_factory=dict)

    def intake(self) -> Intake:
        """A fresh intake, as each invocation of the submit function builds one."""
        return Intake(
            store=self.jobs,
            clusters={"local": self.cluster},
            clock=self.clock,
            metrics=self.metrics,
            config=IntakeConfig(teams=TEAMS, registries=REGISTRIES, submitters=self.submitters),
            serving=self.serving,
        )

    def reconciler(self) -> ServingReconciler:
        return ServingReconciler(serving=self.serving, clock=self.clock)

    def handle(
        self, body: dict[str, Any] | str, *, message_id: str = "m-1", sender_id: str | None = None
    ) -> Any:
        import json

        text = body if isinstance(body, str) else json.dumps(body)
        return self.intake().handle(body=text, message_id=message_id, sender_id=sender_id)

    def finished_job(
        self,
        job_id: str = "train-1",
        *,
        team: str = "research",
        status: JobStatus = JobStatus.SUCCEEDED,
        output_uri: str | None = OUTPUT_URI,
        saved_model: bool = True,
    ) -> Job:
        """A job recorded as run to `status`; with `saved_model`, its export is in the bucket."""
        spec: dict[str, Any] = {"name": job_id, "team": team, "image": SETTINGS.fetch_image}
        if output_uri is not None:
            spec["outputUri"] = output_uri
        job, event = new_job(
            job_id=job_id, name=job_id, team=team, namespace=TEAMS[team], at=self.clock.now(), spec=spec
        )
        self.jobs.create(job, event)
        if status is not JobStatus.QUEUED:
            job, event = transition(job, to=JobStatus.RUNNING, reason=Reason.STARTED, at=self.clock.now())
            self.jobs.save(job, event)
        if status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            reason = Reason.COMPLETED if status is JobStatus.SUCCEEDED else Reason.APPLICATION_ERROR
            job, event = transition(job, to=status, reason=reason, at=self.clock.now())
            self.jobs.save(job, event)
        if saved_model and output_uri is not None:
            key = f"{output_uri.removeprefix(f's3://{BUCKET}/')}/{job_id}/saved_model.pb"
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=b"saved model")
        return job

    def advance(self, minutes: float = 1) -> None:
        self.clock.advance(timedelta(minutes=minutes))
        advance = getattr(self.cluster, "advance", None)
        if advance is not None:
            advance()


def serving_world(cluster: Any = None, *, clock: VirtualClock | None = None) -> Iterator[ServingWorld]:
    """A world inside moto (DynamoDB and S3); call inside a test fixture and yield from it."""
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-west-2")
        create_table(dynamodb, "jobs")
        s3 = boto3.client("s3", region_name="us-west-2")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        clock = clock or VirtualClock()
        cluster = cluster if cluster is not None else StandInCluster()
        services = DynamoModelServiceStore(dynamodb, "jobs")
        serving = ModelServing(
            store=services, saved_models=S3SavedModels(s3), clusters={"local": cluster}, settings=SETTINGS
        )
        yield ServingWorld(
            clock=clock,
            jobs=DynamoJobStore(dynamodb, "jobs"),
            services=services,
            s3=s3,
            cluster=cluster,
            metrics=RecordingMetrics(clock),
            serving=serving,
        )
