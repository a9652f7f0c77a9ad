"""Composition root: builds the services once per process from the settings.

Handlers call `services()`; in Lambda the first call reads the environment,
creates the boto3 clients and the Kubernetes client, and wires the services.

Importing this module (a handler's init) imports the adapters and boto3 that the
first call builds from, and builds nothing: with SnapStart, Lambda snapshots the
initialised process once per published version, so the imports are in the snapshot
while the settings, credentials, clients and connections are made after a restore,
by the first call of each environment. Environments resumed from one snapshot share
its random state; an after-restore hook seeds it again (`_after_restore`). The
local runtime and the tests hand in their own `Services` with `install()` — the
same handler code then runs against the local endpoint and the simulated cluster.
This module and the adapters are the only places that import boto3 or kubernetes.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, cast

from aws_lambda_powertools import Logger

from squall.adapters.aws.identity import ClusterEndpoint
from squall.core.drain import DrainPolicy
from squall.core.errors import RetryableError, SquallError
from squall.core.jobs import Job, JobEvent
from squall.core.resources import DRAIN, FUNCTIONS
from squall.core.settings import ClusterSettings, Settings
from squall.core.telemetry import SERVICE
from squall.planner import NodeGroup
from squall.planner.inputs import read_node_groups
from squall.ports import (
    Clock,
    CostLedger,
    DrainQueue,
    DrainStore,
    Fleet,
    JobStore,
    KubeObject,
    MetricLines,
    MetricsSink,
    ModelServiceStore,
    PriceBook,
    PriceRecords,
    SavedModels,
    ScaleRequests,
    ScaleState,
    ServingCluster,
)
from squall.services.costs import FleetCostMeter, JobCosting, TeamSpend
from squall.services.intake import Intake, IntakeConfig
from squall.services.lifecycle_hooks import LifecycleConfig, LifecycleService
from squall.services.metrics import MetricsCollector
from squall.services.preemption import CheckpointReader, Preempter, ReportedCheckpoints
from squall.services.prices import GroupPrices
from squall.services.reconcile import ReconcileMemory, Reconciler
from squall.services.scale import ParsedObjects, ScaleConfig, Scaler
from squall.services.serving import ModelServing, ServingMemory, ServingReconciler

logger = Logger(service=SERVICE, child=True)

# What `_from_environment` builds the services from: imported at init (see above).
_FIRST_CALL_MODULES = (
    "boto3",
    "squall.adapters.aws.autoscaling",
    "squall.adapters.aws.cost_ledger",
    "squall.adapters.aws.s3_objects",
    "squall.adapters.aws.drain_queue",
    "squall.adapters.aws.drain_store",
    "squall.adapters.aws.eventbridge",
    "squall.adapters.aws.job_store",
    "squall.adapters.aws.metric_lines",
    "squall.adapters.aws.model_service_store",
    "squall.adapters.aws.prices",
    "squall.adapters.aws.saved_models",
    "squall.adapters.aws.scale_state",
    "squall.adapters.kubernetes.cluster",
    "squall.adapters.kubernetes.eks_auth",
)


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass
class Services:
    settings: Settings
    clock: Clock
    store: JobStore
    # cluster name -> its API, in the settings' preference order (one entry for one cluster)
    clusters: Mapping[str, ServingCluster]
    metrics: MetricsSink
    scale_requests: ScaleRequests
    fleet: Fleet | None = None
    scale_state: ScaleState | None = None
    drain_queue: DrainQueue | None = None
    drain_store: DrainStore | None = None
    # team -> unique ids of the principals that may submit for it (IntakeConfig.submitters)
    submitters: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # model services' records and the SavedModels; without both, serve requests are refused
    model_services: ModelServiceStore | None = None
    saved_models: SavedModels | None = None
    # what teams spent per month and the fleet's overhead; None: costs and budgets are not counted
    cost_ledger: CostLedger | None = None
    # when running jobs last checkpointed (preemption chooses by it); None: as their records say
    checkpoints: CheckpointReader | None = None
    # where running jobs' squall-metric lines are read (reconcile's collector); None: not read
    metric_lines: MetricLines | None = None
    # EC2's prices for groups with priceFrom ec2 (asked by the scale check only), and where the
    # last ones are kept; without records, every group keeps its configured prices
    price_book: PriceBook | None = None
    price_records: PriceRecords | None = None

    @property
    def model_serving(self) -> ModelServing | None:
        if self.model_services is None or self.saved_models is None:
            return None
        return ModelServing(
            store=self.model_services,
            saved_models=self.saved_models,
            clusters=self.clusters,
            settings=self.settings.serving,
            groups=self.node_groups,
        )

    @functools.cached_property
    def node_groups(self) -> list[NodeGroup]:
        """The configured groups, parsed once per process (settings do not change).

        Each carries its cluster's name when there are several clusters (the planner tells
        them apart by it); with one cluster, none (the planner's one-cluster case).
        """
        groups = read_node_groups(self.settings.node_groups)[0]
        if len(self.clusters) <= 1:
            return [dataclasses.replace(group, cluster="") for group in groups]
        return [
            dataclasses.replace(group, cluster=self.settings.group_cluster(raw))
            for group, raw in zip(groups, self.settings.node_groups, strict=True)
        ]

    @functools.cached_property
    def group_prices(self) -> GroupPrices | None:
        """The groups' refreshed prices, kept by this process; None when no group asks for them."""
        if self.price_records is None or all(g.price_from != "ec2" for g in self.node_groups):
            return None
        return GroupPrices(records=self.price_records, clock=self.clock, book=self.price_book)

    @functools.cached_property
    def scale_config(self) -> ScaleConfig:
        """The scale check's configuration, made once per process (settings do not change)."""
        return ScaleConfig(
            groups=self.node_groups,
            policy=self.settings.policy.planner_policy(),
            teams=self.settings.team_shares(),
            dry_run=self.settings.dry_run,
            ttl_after_finished=self.settings.policy.job_ttl_after_finished,
            budgets=self.settings.budgets,
            termination_grace=_termination_grace(self.settings),
        )

    @functools.cached_property
    def parsed_objects(self) -> ParsedObjects:
        """Nodes and pods the scale checks of this process have parsed, by resourceVersion."""
        return ParsedObjects()

    @property
    def scaler(self) -> Scaler:
        if self.fleet is None or self.scale_state is None:
            raise RuntimeError("this runtime has no fleet: the scale function needs one")
        return Scaler(
            state=self.scale_state,
            clusters=self.clusters,
            fleet=self.fleet,
            clock=self.clock,
            metrics=self.metrics,
            config=self.scale_config,
            store=self.store,
            parsed=self.parsed_objects,
            ledger=TeamSpend(ledger=self.cost_ledger, store=self.store)
            if self.cost_ledger is not None
            else None,
            cost_meter=FleetCostMeter(ledger=self.cost_ledger, metrics=self.metrics)
            if self.cost_ledger is not None
            else None,
            preempter=self.preempter,
            prices=self.group_prices,
        )

    @property
    def preempter(self) -> Preempter | None:
        """Preemption, when the policy turns it on."""
        policy = self.settings.policy.preemption.planner_policy()
        if not policy.enabled:
            return None
        return Preempter(
            clusters=self.clusters,
            store=self.store,
            metrics=self.metrics,
            policy=policy,
            checkpoints=self.checkpoints,
        )

    @property
    def intake(self) -> Intake:
        settings = self.settings
        return Intake(
            store=self.store,
            clusters=self.clusters,
            clock=self.clock,
            metrics=self.metrics,
            config=IntakeConfig(
                teams=settings.teams,
                registries=settings.allowed_registries,
                ttl_after_finished=settings.policy.job_ttl_after_finished,
                max_runtime_limit=settings.policy.max_runtime_limit,
                submitters=self.submitters,
            ),
            serving=self.model_serving,
            # Its records only, no events (the submit function reads no history): a cancelled
            # run is costed from its record's start.
            costs=JobCosting(
                groups=self.node_groups,
                ledger=self.cost_ledger,
                history=_RecordsOnly(self.store),
                metrics=self.metrics,
            ),
        )

    @property
    def lifecycle(self) -> LifecycleService:
        if (
            self.fleet is None
            or self.scale_state is None
            or self.drain_queue is None
            or self.drain_store is None
        ):
            raise RuntimeError("this runtime has no fleet or drain queue: the lifecycle functions need them")
        groups = self.node_groups
        policy = self.settings.policy
        return LifecycleService(
            drains=self.drain_store,
            queue=self.drain_queue,
            clusters=self.clusters,
            fleet=self.fleet,
            jobs=self.store,
            scale_state=self.scale_state,
            clock=self.clock,
            metrics=self.metrics,
            config=LifecycleConfig(
                groups=groups,
                launch_hook_name=self.settings.launch_hook_name,
                terminate_hook_name=self.settings.terminate_hook_name,
                policy=DrainPolicy(
                    deadline=policy.drain_deadline,
                    provision_timeout=policy.provision_timeout,
                    step_delay=policy.drain_step_delay,
                    # A dying drain invocation's messages come back this late (lease).
                    redelivery=timedelta(seconds=FUNCTIONS[DRAIN].timeout_seconds) + policy.drain_step_delay,
                ),
                planner_policy=policy.planner_policy(),
            ),
        )

    @property
    def reconciler(self) -> Reconciler:
        intake = self.intake
        return Reconciler(
            store=self.store,
            clusters=self.clusters,
            clock=self.clock,
            metrics=self.metrics,
            intake=intake,
            memory=self.reconcile_memory,
            collector=self.metrics_collector,
            costs=JobCosting(
                # a starting job's rate at the prices the scale check last kept (refreshed from EC2)
                groups=self.group_prices.known(self.node_groups) if self.group_prices else self.node_groups,
                ledger=self.cost_ledger,
                history=self.store,
                metrics=self.metrics,
            ),
            serving=ServingReconciler(serving=intake.serving, clock=self.clock, memory=self.serving_memory)
            if intake.serving is not None
            else None,
        )

    @functools.cached_property
    def reconcile_memory(self) -> ReconcileMemory:
        """What the last reconcile run of this process read (a quiet run ends after its reads)."""
        return ReconcileMemory()

    @functools.cached_property
    def metrics_collector(self) -> MetricsCollector | None:
        """Reads running jobs' metric lines in each reconcile check (which it read last kept by this process)."""
        if self.metric_lines is None:
            return None
        return MetricsCollector(store=self.store, lines=self.metric_lines)

    @functools.cached_property
    def serving_memory(self) -> ServingMemory:
        """Where the last serving reconcile of this process stopped (it takes the services in turn)."""
        return ServingMemory()


@dataclass(frozen=True)
class _RecordsOnly:
    """A job history of records without events: what the submit function may read."""

    store: JobStore

    def get(self, job_id: str) -> Job | None:
        return self.store.get(job_id)

    def events(self, job_id: str) -> list[JobEvent]:
        return []


def _termination_grace(settings: Settings) -> timedelta | None:
    """With preemption on, its grace for every admitted pod (never less than Kubernetes' 30 s)."""
    preemption = settings.policy.preemption.planner_policy()
    return max(preemption.grace, timedelta(seconds=30)) if preemption.enabled else None


class NamespacedCluster:
    """The cluster as a function allowed to read only some namespaces sees it.

    The functions of the squall-jobs Kubernetes group may read Jobs and Pods in
    the team namespaces only (stacks/rbac binds their read role per namespace);
    a list across the cluster becomes one list per namespace. The scale function
    reads and patches Jobs in those namespaces only too (admission, gang release),
    but Pods across the cluster (`cluster_wide_pods`): any pod on a node counts for
    its use. Everything else is the wrapped cluster's.
    """

    def __init__(
        self, cluster: ServingCluster, namespaces: Sequence[str], *, cluster_wide_pods: bool = False
    ) -> None:
        self._cluster = cluster
        self._namespaces = tuple(dict.fromkeys(namespaces))
        self._cluster_wide_pods = cluster_wide_pods

    def create(self, manifest: KubeObject) -> bool:
        return self._cluster.create(manifest)

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        return self._cluster.delete_job_objects(namespace=namespace, job_id=job_id)

    def patch_job(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return self._cluster.patch_job(namespace=namespace, name=name, patch=patch)

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        return [
            job
            for ns in self._scope(namespace)
            for job in self._cluster.list_jobs(namespace=ns, job_id=job_id)
        ]

    def list_pods(
        self, *, namespace: str | None = None, job_id: str | None = None, node_name: str | None = None
    ) -> list[KubeObject]:
        if self._cluster_wide_pods:
            return self._cluster.list_pods(namespace=namespace, job_id=job_id, node_name=node_name)
        return [
            pod
            for ns in self._scope(namespace)
            for pod in self._cluster.list_pods(namespace=ns, job_id=job_id, node_name=node_name)
        ]

    def list_nodes(self) -> list[KubeObject]:
        return self._cluster.list_nodes()

    def get_node(self, name: str) -> KubeObject | None:
        return self._cluster.get_node(name)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return self._cluster.patch_node(name, patch)

    def evict(self, *, namespace: str, name: str) -> bool:
        return self._cluster.evict(namespace=namespace, name=name)

    # ---- model services: their objects live in the team namespaces too ----

    def list_deployments(
        self, *, namespace: str | None = None, model_service: str | None = None
    ) -> list[KubeObject]:
        return [
            deployment
            for ns in self._scope(namespace)
            for deployment in self._cluster.list_deployments(namespace=ns, model_service=model_service)
        ]

    def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[KubeObject]:
        if not self._scope(namespace):
            return []
        return self._cluster.list_model_service_pods(namespace=namespace, model_service=model_service)

    def get_service(self, *, namespace: str, name: str) -> KubeObject | None:
        if not self._scope(namespace):
            return None
        return self._cluster.get_service(namespace=namespace, name=name)

    def delete_model_service_objects(self, *, namespace: str, model_service: str) -> int:
        return self._cluster.delete_model_service_objects(namespace=namespace, model_service=model_service)

    def _scope(self, namespace: str | None) -> tuple[str, ...]:
        if namespace is None:
            return self._namespaces
        return (namespace,) if namespace in self._namespaces else ()


_installed: Services | None = None


def install(services: Services | None) -> None:
    """Use these services instead of building them from the environment (None resets)."""
    global _installed
    _installed = services


def services(metrics: Any | None = None) -> Services:
    """The process's services; `metrics` is the handler's powertools Metrics object."""
    if _installed is not None:
        return _installed
    return _from_environment(metrics)


@cache
def _from_environment(metrics: Any | None) -> Services:
    import boto3

    from squall.adapters.aws.autoscaling import AutoScalingFleet
    from squall.adapters.aws.cost_ledger import DynamoCostLedger
    from squall.adapters.aws.drain_queue import SqsDrainQueue
    from squall.adapters.aws.drain_store import DynamoDrainStore
    from squall.adapters.aws.eventbridge import EventBridgeScaleRequests
    from squall.adapters.aws.identity import IamPrincipals, resolve_submitters
    from squall.adapters.aws.job_store import DynamoJobStore
    from squall.adapters.aws.metric_lines import CloudWatchMetricLines
    from squall.adapters.aws.model_service_store import DynamoModelServiceStore
    from squall.adapters.aws.prices import DynamoPriceRecords, Ec2PriceBook
    from squall.adapters.aws.s3_objects import S3ObjectReader
    from squall.adapters.aws.saved_models import S3SavedModels
    from squall.adapters.aws.scale_state import DynamoScaleState
    from squall.adapters.kubernetes.cluster import KubernetesCluster
    from squall.adapters.kubernetes.eks_auth import api_client_for
    from squall.core.telemetry import PowertoolsMetrics, RecordingMetrics

    settings = Settings()  # the settings file, and the SQUALL_* variables
    session = boto3.session.Session()
    clock = SystemClock()
    dynamodb = session.client("dynamodb")
    clients: dict[tuple[str, str], Any] = {}

    def regional(service: str, region: str) -> Any:
        if (service, region) not in clients:
            clients[(service, region)] = session.client(service, region_name=region)
        return clients[(service, region)]

    def built(configured: ClusterSettings) -> ServingCluster:
        if not (configured.certificate_authority and configured.endpoint):
            configured = _described(configured, _describer(regional, configured, session.region_name))
        cluster: ServingCluster = KubernetesCluster(api_client_for(configured, session=session))
        if settings.namespaces:
            cluster = NamespacedCluster(
                cluster, settings.namespaces, cluster_wide_pods=settings.cluster_wide_pods
            )
        return cluster

    clusters: dict[str, ServingCluster] = {}
    cluster_regions = {c.name: c.region for c in settings.clusters}
    for configured in settings.clusters:
        try:
            clusters[configured.name] = built(configured)
        except SquallError as exc:
            # One cluster's DescribeCluster failing must not take every function down with it:
            # that cluster is unreachable (its calls raise RetryableError) until a call builds it.
            logger.warning("cluster not built at cold start", cluster=configured.name, error=str(exc))
            clusters[configured.name] = cast(
                ServingCluster, BuiltLater(configured.name, functools.partial(built, configured))
            )
    submitters: dict[str, frozenset[str]] = {}
    if settings.submitters:
        resolved = resolve_submitters(settings.submitters, IamPrincipals(session.client("iam")))
        for principal, why in resolved.unresolved.items():
            # Its team stays restricted to the principals that were found.
            logger.error("submitter left out: IAM does not know it", principal=principal, error=why)
        submitters = resolved.by_team
    return Services(
        settings=settings,
        clock=clock,
        store=DynamoJobStore(dynamodb, settings.table_name),
        clusters=clusters,
        metrics=PowertoolsMetrics(metrics) if metrics is not None else RecordingMetrics(clock),
        scale_requests=EventBridgeScaleRequests(session.client("events"), bus_name=settings.event_bus_name),
        fleet=AutoScalingFleet(
            lambda region: regional("autoscaling", region),
            ec2_clients=lambda region: regional("ec2", region),
        ),
        scale_state=DynamoScaleState(dynamodb, settings.table_name),
        drain_queue=SqsDrainQueue(session.client("sqs"), queue_url=settings.drain_queue_url)
        if settings.drain_queue_url
        else None,
        drain_store=DynamoDrainStore(dynamodb, settings.table_name),
        submitters=submitters,
        model_services=DynamoModelServiceStore(dynamodb, settings.table_name),
        saved_models=S3SavedModels(session.client("s3")),
        cost_ledger=DynamoCostLedger(dynamodb, settings.table_name),
        checkpoints=ReportedCheckpoints(objects=S3ObjectReader(session.client("s3"))).latest,
        # each cluster's application log group is in the cluster's region
        metric_lines=CloudWatchMetricLines(
            clusters=clusters,
            logs_client=lambda name: regional("logs", cluster_regions.get(name) or session.region_name),
        ),
        price_book=Ec2PriceBook.in_session(session),  # its clients made on the first price asked
        price_records=DynamoPriceRecords(dynamodb, settings.table_name),
    )


def _after_restore() -> None:
    """Seed the random state again: every environment resumed from one snapshot shares it
    (botocore's retry jitter would be in step); ids come from uuid4, which reads the OS."""
    random.seed()


def _prepare_for_init() -> None:
    for module in _FIRST_CALL_MODULES:
        importlib.import_module(module)
    try:
        # Lambda's managed Python runtimes include it; elsewhere there is no snapshot.
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return
    register_after_restore(_after_restore)


_prepare_for_init()


class BuiltLater:
    """A cluster whose client could not be built at cold start (its DescribeCluster failed):
    every call tries to build it again first, and is RetryableError until that succeeds."""

    def __init__(self, name: str, build: Callable[[], ServingCluster]) -> None:
        self._name = name
        self._build = build
        self._built: ServingCluster | None = None

    def _cluster(self) -> ServingCluster:
        if self._built is None:
            try:
                self._built = self._build()
            except SquallError as exc:
                raise RetryableError(f"cluster {self._name} cannot be reached: {exc}") from exc
        return self._built

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster(), name)


def _describer(
    regional: Callable[[str, str], Any], cluster: ClusterSettings, default_region: str | None
) -> Callable[[], ClusterEndpoint]:
    """DescribeCluster of one configured cluster, in its region."""
    from squall.adapters.aws.identity import describe_cluster

    return lambda: describe_cluster(regional("eks", cluster.region or default_region or ""), cluster.name)


def _described(cluster: ClusterSettings, describe: Callable[[], ClusterEndpoint]) -> ClusterSettings:
    """The cluster settings with what the settings leave out filled in by DescribeCluster."""
    if not cluster.name:
        raise ValueError(
            "the cluster settings need the EKS cluster's name to look up its endpoint and certificate"
        )
    found = describe()
    return cluster.model_copy(
        update={
            "endpoint": cluster.endpoint or found.endpoint,
            "certificate_authority": cluster.certificate_authority or found.certificate_authority,
        }
    )
