"""Names and sizes of everything the stacks create, in one place.

Physical names derive from the ``prefix`` setting, so two Squall deployments can
share an account, and the CLI and the local runtime find the queue and the table
by name (``<prefix>-jobs``) without reading stack outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# -- Lambda asset ---------------------------------------------------------------------

FUNCTIONS_DIR = REPO_ROOT / "functions"
PYPROJECT = REPO_ROOT / "pyproject.toml"
# The CLI and the local runtime live in the package but never run in a function.
ASSET_EXCLUDES = (
    "squall/local",
    "squall/local/**",
    "squall/cli.py",
    "**/__pycache__",
    "**/*.pyc",
    "*.egg-info",
    "*.egg-info/**",
)
# Provided by the Lambda Python runtime: bundling it would add ~100 MB unzipped
# and slow every cold start for nothing.
RUNTIME_PROVIDED_DISTRIBUTIONS = frozenset({"boto3", "botocore", "s3transfer"})
# arm64 (Graviton) costs less per GB-second; every dependency ships aarch64 wheels.
PIP_PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"

# -- functions ------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpec:
    handler: str
    description: str
    timeout_seconds: int
    memory_mb: int = 512  # the kubernetes client alone takes ~60 MB; 512 MB buys CPU too
    reserved_concurrency: int | None = None
    # Asynchronous invocations (EventBridge): how long an event may wait, and how
    # often a failed one is retried. None keeps Lambda's defaults (6 h, 2 retries).
    max_event_age_seconds: int | None = None
    async_retries: int | None = None


SUBMIT = "submit"
SCALE = "scale"
LIFECYCLE = "lifecycle"
DRAIN = "drain"
RECONCILE = "reconcile"

FUNCTIONS: dict[str, FunctionSpec] = {
    SUBMIT: FunctionSpec(
        handler="squall.handlers.submit.handler",
        description="Records queued jobs and creates their Kubernetes objects",
        timeout_seconds=60,
    ),
    SCALE: FunctionSpec(
        handler="squall.handlers.scale.handler",
        description="Plans and applies GPU capacity in every region",
        # Shorter than the one-minute schedule, so one check ends before the next.
        timeout_seconds=50,
        memory_mb=1024,
        # One planner at a time: two concurrent plans would both launch for the
        # same pending pods.
        reserved_concurrency=1,
        # A scale check that waited two minutes is stale (the schedule has run a
        # newer one), and a failed one is superseded by the next minute's.
        max_event_age_seconds=120,
        async_retries=0,
    ),
    LIFECYCLE: FunctionSpec(
        handler="squall.handlers.lifecycle.handler",
        description="Answers Auto Scaling launch and terminate lifecycle hooks",
        timeout_seconds=60,
    ),
    DRAIN: FunctionSpec(
        handler="squall.handlers.drain.handler",
        description="Continues long node drains from the delayed drain queue",
        timeout_seconds=60,
    ),
    RECONCILE: FunctionSpec(
        handler="squall.handlers.reconcile.handler",
        description="Brings job records in line with Kubernetes and retries lost jobs",
        timeout_seconds=50,
        max_event_age_seconds=120,
        async_retries=0,
    ),
}


def function_name(prefix: str, handler: str) -> str:
    return f"{prefix}-{handler}"


# -- queues and table -----------------------------------------------------------------

# AWS recommends a visibility timeout of at least six times the consumer's timeout,
# so a message is not redelivered while a throttled batch is still being retried.
VISIBILITY_TIMEOUT_FACTOR = 6
JOBS_BATCH_SIZE = 10
DRAIN_BATCH_SIZE = 10
# Bounds the load the submit function puts on the Kubernetes API during a burst.
SUBMIT_MAX_CONCURRENCY = 5
JOBS_MAX_RECEIVE_COUNT = 5
DRAIN_MAX_RECEIVE_COUNT = 10
DEAD_LETTER_RETENTION_DAYS = 14


def jobs_queue_name(prefix: str) -> str:
    return f"{prefix}-jobs"


def drain_queue_name(prefix: str) -> str:
    return f"{prefix}-drain"


def dead_letter_queue_name(queue_name: str) -> str:
    return f"{queue_name}-dlq"


def table_name(prefix: str) -> str:
    return f"{prefix}-jobs"


TABLE_PARTITION_KEY = "pk"
TABLE_SORT_KEY = "sk"
STATUS_INDEX = "status-index"
STATUS_INDEX_PARTITION_KEY = "gsi1pk"
STATUS_INDEX_SORT_KEY = "gsi1sk"
TTL_ATTRIBUTE = "expiresAt"

# -- events ---------------------------------------------------------------------------

# The default bus: Auto Scaling delivers its events there, and so do the
# forwarding rules of the other regions.
EVENT_BUS_NAME = "default"
SCHEDULE_MINUTES = 1
SCALE_CHECK_SOURCE = "squall.jobs"
SCALE_CHECK_DETAIL_TYPE = "Scale Check Requested"
AUTOSCALING_SOURCE = "aws.autoscaling"
LAUNCH_LIFECYCLE_ACTION = "EC2 Instance-launch Lifecycle Action"
TERMINATE_LIFECYCLE_ACTION = "EC2 Instance-terminate Lifecycle Action"
LAUNCH_UNSUCCESSFUL = "EC2 Instance Launch Unsuccessful"

# -- lifecycle hooks and GPU groups ---------------------------------------------------

LAUNCH_TRANSITION = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATE_TRANSITION = "autoscaling:EC2_INSTANCE_TERMINATING"
# The drain function heartbeats every drain step; this only has to outlast one step.
TERMINATE_HEARTBEAT_MIN_SECONDS = 300
GROUP_COOLDOWN_SECONDS = 60
HEALTH_CHECK_GRACE_SECONDS = 300
ROOT_VOLUME_GIB = 200  # CUDA images are large; 20 GiB default roots fill on first pull
ROOT_DEVICE_NAME = "/dev/xvda"
NODE_TEMPLATE_TAG = "k8s.io/cluster-autoscaler/node-template"
GPU_RESOURCE = "nvidia.com/gpu"


def gpu_ami_parameter(kubernetes_version: str) -> str:
    """Public SSM parameter with the latest EKS-optimised AL2023 NVIDIA AMI."""
    return (
        f"/aws/service/eks/optimized-ami/{kubernetes_version}"
        "/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
    )


def node_role_name(prefix: str, home_region: str) -> str:
    """IAM names are global: the home region tells two deployments' roles apart."""
    return f"{prefix}-gpu-node-{home_region}"


# -- cluster access -------------------------------------------------------------------

KUBERNETES_JOBS_GROUP = "squall-jobs"
KUBERNETES_CAPACITY_GROUP = "squall-capacity"
# Which Kubernetes groups (bound in stacks/rbac/squall-rbac.yaml) each function's
# role is mapped to: submit and reconcile manage jobs in team namespaces; scale,
# lifecycle and drain read pods and cordon, uncordon and drain nodes.
KUBERNETES_GROUPS: dict[str, tuple[str, ...]] = {
    SUBMIT: (KUBERNETES_JOBS_GROUP,),
    RECONCILE: (KUBERNETES_JOBS_GROUP,),
    SCALE: (KUBERNETES_CAPACITY_GROUP,),
    LIFECYCLE: (KUBERNETES_CAPACITY_GROUP,),
    DRAIN: (KUBERNETES_CAPACITY_GROUP,),
}
RBAC_MANIFEST = Path(__file__).resolve().parent / "rbac" / "squall-rbac.yaml"

# -- monitoring -----------------------------------------------------------------------

LOG_RETENTION_DAYS = 30
LAMBDA_ENVIRONMENT_LIMIT_BYTES = 4096
