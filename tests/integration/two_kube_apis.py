"""Two Kubernetes API stand-ins over HTTP, each behind the production adapter, and one queue.

The world of test_two_api_servers.py: two kmock servers (kube_server.py), "west" in
us-west-2 and "east" in us-east-1, each wrapped by KubernetesCluster and handed to the
real services as ``clusters={"west": ..., "east": ...}``; the queue is the in-memory
job store (the same queue index as DynamoDB). Nothing runs pods here: a test puts the
nodes, and the pods a kubelet would report, itself (`node`, `run`), and marks a Job
complete (`complete`) as the Job controller would.

`Storm` fails every request of one server (503, 401, or no answer in time) while it
lasts, then lets them through again: a storm with an end, which kmock's `times=`
cannot give (how many requests a check sends is not the test's to count).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import kmock

from squall.adapters.kubernetes.cluster import KubernetesCluster
from squall.adapters.kubernetes.eks_auth import build_api_client
from squall.conventions import GPU_RESOURCE, JOB_ID_LABEL, REGION_LABEL
from squall.core.jobs import Job
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.memory import InMemoryJobStore
from squall.planner import Policy
from squall.services.admission import Admitter
from squall.services.intake import Intake, IntakeConfig
from squall.services.reconcile import Reconciler
from tests.job_records import StepReport

from .kube_server import KubeApi, running_kube_api

REGIONS = {"west": "us-west-2", "east": "us-east-1"}
TEAM = "research"
NAMESPACE = "team-research"
IMAGE = "registry.example.com/squall/t:1"
P3 = {"cpu": "32", "memory": "244Gi", GPU_RESOURCE: "4", "pods": "58"}
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
# Connect and read timeouts: a stand-in answers in milliseconds, a hung one after HANG seconds.
REQUEST_TIMEOUT = (2.0, 1.0)
HANG = 2.0


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class Storm:
    """While on, one server fails every request (matching `criteria`) one way; off, it serves again.

    `failure`: an HTTP status ("503", the 5xx storm; "401", credentials the server no
    longer takes), answered with a Kubernetes Status body, or "hung": the server holds
    the request past the adapter's read timeout (HANG), then lets it through.
    kmock's emulator stores what a create sent whatever a reaction answers: a failed
    create is one the server made but whose answer was lost, as can happen.
    """

    def __init__(self, kube: KubeApi, *criteria: Any, failure: str = "503") -> None:
        self.on = False
        status = 0 if failure == "hung" else int(failure)
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected {failure}",
            "reason": {503: "ServiceUnavailable", 401: "Unauthorized"}.get(status, f"Status{status}"),
            "code": status,
        }

        async def answer(request: kmock.Request) -> kmock.Response:
            if self.on and failure != "hung":
                return kmock.Response(status=status, payload=body)
            if self.on:
                await asyncio.sleep(HANG)
            # kmock's "matched, nothing to answer": the next reaction serves it.
            raise NotImplementedError

        kube.call(lambda: kube.emulator[criteria] << answer)


@dataclass
class Api:
    """One API server: its stand-in, the production adapter over it, and its region."""

    name: str
    region: str
    kube: KubeApi
    cluster: KubernetesCluster

    def objects(self, job_id: str) -> list[str]:
        """The names of the job's Jobs and Services stored in this server."""
        return sorted(
            f"{obj['kind']}/{obj['metadata']['name']}"
            for resource in ("batch/v1/jobs", "v1/services")
            for obj in self.kube.objects(resource, NAMESPACE)
            if (obj["metadata"].get("labels") or {}).get(JOB_ID_LABEL) == job_id
        )

    def posted(self) -> list[str]:
        """The object names every create (POST) this server was sent was for, in order."""
        return [_posted_name(request) for request in self.kube.requests(kmock.method.POST)]


def _posted_name(request: kmock.Request) -> str:
    body = request.data if isinstance(request.data, dict) else json.loads(request.body)
    return f"{body['kind']}/{body['metadata']['name']}"


@dataclass
class TwoApis:
    clock: VirtualClock
    store: InMemoryJobStore
    metrics: RecordingMetrics
    apis: dict[str, Api]
    intake: Intake
    reconciler: Reconciler

    @property
    def clusters(self) -> dict[str, KubernetesCluster]:
        return {name: api.cluster for name, api in self.apis.items()}

    @property
    def west(self) -> Api:
        return self.apis["west"]

    @property
    def east(self) -> Api:
        return self.apis["east"]

    # ---- what the cloud and the kubelet would do --------------------------------------

    def node(
        self,
        cluster: str,
        name: str,
        *,
        instance_id: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> str:
        """A ready GPU node in `cluster`'s region (its name may be the other cluster's too)."""
        region = REGIONS[cluster]
        since = rfc3339(self.clock.now() - timedelta(hours=1))
        spec: dict[str, Any] = {"taints": [GPU_TAINT]}
        if instance_id is not None:
            spec["providerID"] = f"aws:///{region}a/{instance_id}"
        self.apis[cluster].kube.put(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {REGION_LABEL: region},
                    "annotations": dict(annotations or {}),
                    "creationTimestamp": since,
                },
                "spec": spec,
                "status": {
                    "allocatable": P3,
                    "capacity": P3,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since}],
                },
            }
        )
        return name

    def run(self, cluster: str, job_id: str, *, node: str) -> None:
        """Each of the job's Jobs in `cluster` has its pod running on `node` (the Job controller,
        the scheduler and the kubelet, in one step)."""
        kube = self.apis[cluster].kube
        started = rfc3339(self.clock.now())
        jobs = [
            job
            for job in kube.objects("batch/v1/jobs", NAMESPACE)
            if (job["metadata"].get("labels") or {}).get(JOB_ID_LABEL) == job_id
        ]
        assert jobs, f"job {job_id} has no Jobs in {cluster}"
        for job in jobs:
            template = job["spec"]["template"]
            kube.put(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job['metadata']['name']}-abcde",
                        "namespace": NAMESPACE,
                        "labels": dict(template["metadata"]["labels"]),
                    },
                    "spec": {**template["spec"], "nodeName": node},
                    "status": {
                        "phase": "Running",
                        "containerStatuses": [
                            {"name": c["name"], "state": {"running": {"startedAt": started}}}
                            for c in template["spec"]["containers"]
                        ],
                    },
                }
            )

    def complete(self, cluster: str, job_id: str) -> None:
        """The job's worker 0 Job completed, as the Job controller reports it."""
        kube = self.apis[cluster].kube
        name = f"{job_id}-worker-0"
        stored = kube.get("batch/v1/jobs", NAMESPACE, name)
        assert stored is not None, f"{name} is not in {cluster}"
        done = rfc3339(self.clock.now())
        stored["status"] = {
            "succeeded": 1,
            "startTime": done,
            "completionTime": done,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": done}],
        }
        kube.put(stored)

    # ---- the services ----------------------------------------------------------------

    def submit(self, job_id: str, *, gpus: int = 4, workers: int = 1) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": TEAM,
            "image": IMAGE,
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
            "replicas": {"worker": workers},
        }
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def admit(self) -> StepReport:
        """Admission as the scale check runs it, without a fleet to plan for."""
        report = StepReport()
        Admitter(
            clusters=self.clusters, metrics=self.metrics, teams={}, policy=Policy(), store=self.store
        ).run(now=self.clock.now(), outcome=report)
        return report

    def job(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        assert job is not None
        return job

    def where(self, job_id: str) -> set[str]:
        """The servers holding any object of the job."""
        return {name for name, api in self.apis.items() if api.objects(job_id)}


@contextlib.contextmanager
def two_kube_apis() -> Iterator[TwoApis]:
    """Two fresh stand-ins, west then east (configuration order), and the services over them."""
    with contextlib.ExitStack() as stack:
        apis = {}
        for name, region in REGIONS.items():
            _, kube = stack.enter_context(running_kube_api())
            client = stack.enter_context(build_api_client(host=kube.url))
            apis[name] = Api(name, region, kube, KubernetesCluster(client, request_timeout=REQUEST_TIMEOUT))
        clock = VirtualClock()
        store = InMemoryJobStore()
        metrics = RecordingMetrics(clock)
        clusters = {name: api.cluster for name, api in apis.items()}
        intake = Intake(
            store=store,
            clusters=clusters,
            clock=clock,
            metrics=metrics,
            config=IntakeConfig(teams={TEAM: NAMESPACE}, registries=["registry.example.com/squall"]),
        )
        reconciler = Reconciler(store=store, clusters=clusters, clock=clock, metrics=metrics, intake=intake)
        yield TwoApis(clock, store, metrics, apis, intake, reconciler)
