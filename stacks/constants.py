"""Names and sizes of everything the stacks create, in one place.

Physical names derive from the ``prefix`` setting, so two Squall deployments can
share an account, and the CLI and the local runtime find the queue and the table
by name (``<prefix>-jobs``) without reading stack outputs.
"""

from __future__ import annotations

from pathlib import Path

from squall.core import queue

# Re-exported: shared with the local runtime, which plays these resources.
from squall.core.resources import (  # noqa: F401
    DEAD_LETTER_RETENTION_DAYS,
    DRAIN,
    DRAIN_BATCH_SIZE,
    DRAIN_MAX_RECEIVE_COUNT,
    DRAIN_VISIBILITY_TIMEOUT,
    FUNCTIONS,
    JOBS_BATCH_SIZE,
    JOBS_MAX_RECEIVE_COUNT,
    JOBS_VISIBILITY_TIMEOUT,
    LAMBDA_DEFAULT_ASYNC_RETRIES,
    LIFECYCLE,
    MANAGED_BY_TAG,
    NODE_GROUP_TAG,
    RECONCILE,
    SCALE,
    SQS_MAX_MESSAGE_BYTES,
    SUBMIT,
    SUBMIT_MAX_CONCURRENCY,
    VISIBILITY_TIMEOUT_FACTOR,
    FunctionSpec,
    async_retries,
    dead_letter_queue_name,
    drain_queue_name,
    event_failures_queue_name,
    function_name,
    jobs_queue_name,
    lifecycle_failures_queue_name,
    table_name,
    visibility_timeout,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

# -- Lambda asset ---------------------------------------------------------------------

FUNCTIONS_DIR = REPO_ROOT / "functions"
PYPROJECT = REPO_ROOT / "pyproject.toml"
# The CLI and the local runtime live in the package but never run in a function.
ASSET_EXCLUDES = (
    "squall/local",
    "squall/local/**",
    # The `squall` command (its researcher's and serving commands, the follow loops) runs on
    # a laptop, never in Lambda.
    "squall/cli",
    "squall/cli/**",
    # The source tree's own bytecode, of whatever Python the developer runs: the asset's
    # is compiled for the runtime at bundling (packaging.compile_command).
    "**/__pycache__",
    "**/*.pyc",
    "*.egg-info",
    "*.egg-info/**",
)
# The alias every trigger invokes: the function's current published version, which
# SnapStart restores new environments of (stacks/functions.py).
LIVE_ALIAS = "live"
# Provided by the Lambda Python runtime: bundling it would add ~100 MB unzipped
# and slow every cold start for nothing.
RUNTIME_PROVIDED_DISTRIBUTIONS = frozenset({"boto3", "botocore", "s3transfer"})
# Pulled in by optuna for its database storage only (Squall's studies are rebuilt in memory
# from the trial records): ~33 MB unzipped that would take the asset near Lambda's 250 MB.
UNUSED_DISTRIBUTIONS = frozenset({"sqlalchemy", "alembic", "mako"})
# arm64 (Graviton) costs less per GB-second; every dependency ships aarch64 wheels.
PIP_PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"
# Names the interpreter of PYTHON_VERSION that compiles the asset's bytecode, when it is
# neither the one running the CDK app nor python3.12 on PATH nor a pyenv version.
BUNDLING_PYTHON_VARIABLE = "SQUALL_BUNDLING_PYTHON"

# -- table ----------------------------------------------------------------------------

# Function, queue and table names and sizes: squall/resources.py (imported above).
TABLE_PARTITION_KEY = "pk"
TABLE_SORT_KEY = "sk"
STATUS_INDEX = "status-index"
STATUS_INDEX_PARTITION_KEY = "gsi1pk"
STATUS_INDEX_SORT_KEY = "gsi1sk"
# The queue of jobs waiting for admission (core/queue.py): a sparse index, INCLUDE projection.
QUEUE_INDEX = queue.QUEUE_INDEX
QUEUE_INDEX_PARTITION_KEY = queue.QUEUE_INDEX_PARTITION_KEY
QUEUE_INDEX_SORT_KEY = queue.QUEUE_INDEX_SORT_KEY
QUEUE_INDEX_ATTRIBUTES = queue.QUEUE_INDEX_ATTRIBUTES
TTL_ATTRIBUTE = "expiresAt"

# What each function's code asks of the job table (store.py, state.py,
# drain_store.py, through the services it runs): a save is a transaction of an
# UpdateItem and a PutItem; only reconcile queries the status index; only scale
# deletes (its lease). No function scans.
_ITEM_WRITES = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
TABLE_ACTIONS: dict[str, tuple[str, ...]] = {
    SUBMIT: _ITEM_WRITES,
    SCALE: (*_ITEM_WRITES, "dynamodb:Query", "dynamodb:DeleteItem"),
    LIFECYCLE: (*_ITEM_WRITES, "dynamodb:Query"),
    DRAIN: (*_ITEM_WRITES, "dynamodb:Query"),
    RECONCILE: (*_ITEM_WRITES, "dynamodb:Query"),
}
STATUS_INDEX_READERS = frozenset({RECONCILE})
# The scale check reads the queue (JobStore.queue): a query on the queue index.
QUEUE_INDEX_READERS = frozenset({SCALE})
# Every function that queries one of the table's indexes (their ARNs: table/<name>/index/*).
INDEX_READERS = STATUS_INDEX_READERS | QUEUE_INDEX_READERS
# Model services share the job table (core/serving.py): pk=SERVICE#<name> for a service's
# record and events, gsi1pk=SERVICE_STATUS#<status> in the status index.
SERVICE_KEY_PREFIX = "SERVICE#"
SERVICE_STATUS_KEY_PREFIX = "SERVICE_STATUS#"

# -- settings -------------------------------------------------------------------------

# The functions' settings files, inside the Lambda asset (functions/squall/core/settings.py).
SETTINGS_DIR = "squall-settings"
# What each function reads from its settings (functions/squall/runtime.py and the
# services it builds); nothing else goes into its file.
SETTINGS_NEEDED: dict[str, tuple[str, ...]] = {
    SUBMIT: (
        "teams",
        "submitters",
        "namespaces",
        "allowed_registries",
        "policy",
        "clusters",
        "event_bus_name",
        # A serve request renders the model service's objects and creates them, in the cluster
        # whose ready nodes or node groups have room for it.
        "serving",
        "node_groups",
    ),
    SCALE: (
        "node_groups",
        "policy",
        "teams",
        "quotas",
        "budgets",
        "namespaces",
        "cluster_wide_pods",
        "clusters",
        "dry_run",
    ),
    LIFECYCLE: ("node_groups", "policy", "clusters", "launch_hook_name", "terminate_hook_name"),
    DRAIN: ("node_groups", "policy", "clusters", "launch_hook_name", "terminate_hook_name"),
    # Reconcile creates a model service's objects again when its Deployment is gone.
    # Its groups price a starting job's pods (a job's rate) and place model services.
    RECONCILE: ("teams", "namespaces", "allowed_registries", "policy", "clusters", "serving", "node_groups"),
}

# -- events ---------------------------------------------------------------------------

# The default bus: Auto Scaling delivers its events there, and so do the
# forwarding rules of the other regions.
EVENT_BUS_NAME = "default"
SCHEDULE_MINUTES = 1
SCALE_CHECK_SOURCE = "squall.core.jobs"
SCALE_CHECK_DETAIL_TYPE = "Scale Check Requested"
AUTOSCALING_SOURCE = "aws.autoscaling"
LAUNCH_LIFECYCLE_ACTION = "EC2 Instance-launch Lifecycle Action"
TERMINATE_LIFECYCLE_ACTION = "EC2 Instance-terminate Lifecycle Action"
LAUNCH_UNSUCCESSFUL = "EC2 Instance Launch Unsuccessful"
# How often EventBridge tries again to deliver an Auto Scaling event; the event's
# maximum age (the hooks' timeouts) usually ends the retries first.
EVENT_RETRY_ATTEMPTS = 8
FAILED_EVENT_RETENTION_DAYS = 14

# -- lifecycle hooks and GPU groups ---------------------------------------------------

LAUNCH_TRANSITION = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATE_TRANSITION = "autoscaling:EC2_INSTANCE_TERMINATING"
# The drain function heartbeats every drain step; this only has to outlast one step.
TERMINATE_HEARTBEAT_MIN_SECONDS = 300
GROUP_COOLDOWN_SECONDS = 60
HEALTH_CHECK_GRACE_SECONDS = 300
ROOT_VOLUME_GIB = 200  # CUDA images are large; 20 GiB default roots fill on first pull
ROOT_DEVICE_NAME = "/dev/xvda"
# Created nodes answer IMDS one hop away: the node itself, not its pods.
IMDS_HOP_LIMIT = 1
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
KUBERNETES_GANGS_GROUP = "squall-gangs"
# Which Kubernetes groups (bound by stacks/rbac) each function's role is mapped to:
# submit and reconcile manage and read jobs and model services in the team
# namespaces only; scale, lifecycle and drain read every node's pods and cordon,
# uncordon and drain nodes; scale also deletes the objects of a stranded gang (team
# namespaces only).
KUBERNETES_GROUPS: dict[str, tuple[str, ...]] = {
    SUBMIT: (KUBERNETES_JOBS_GROUP,),
    RECONCILE: (KUBERNETES_JOBS_GROUP,),
    SCALE: (KUBERNETES_CAPACITY_GROUP, KUBERNETES_GANGS_GROUP),
    LIFECYCLE: (KUBERNETES_CAPACITY_GROUP,),
    DRAIN: (KUBERNETES_CAPACITY_GROUP,),
}
RBAC_MANIFEST = Path(__file__).resolve().parent / "rbac" / "squall-rbac.yaml"

# -- workloads: artifacts, job identities, log agent, researchers ----------------------

# Code archives are content-addressed (code/<team>/<sha256>.tar.gz) and never change;
# they must outlive the longest job (config checks codeExpirationDays > maxRuntimeLimit).
CODE_PREFIX = "code"
# Each team's checkpoints, event files and outputs: teams/<team>/...
TEAMS_PREFIX = "teams"
# The file whose presence says a SavedModel is there (adapters/aws/saved_models.py asks
# HeadObject for <model uri>/saved_model.pb): all the submit function may read in S3.
SAVED_MODEL_FILE = "saved_model.pb"
CODE_EXPIRATION_DAYS = 90
NONCURRENT_VERSION_DAYS = 7
INCOMPLETE_UPLOAD_DAYS = 7
ACCESS_LOG_EXPIRATION_DAYS = 365
# Job pods run under this service account in their team namespace (Pod Identity).
JOB_SERVICE_ACCOUNT = "squall-job"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
LOG_AGENT_ADDON = "amazon-cloudwatch-observability"
LOG_AGENT_NAMESPACE = "amazon-cloudwatch"
LOG_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
LOG_AGENT_MANAGED_POLICY = "CloudWatchAgentServerPolicy"
# Each team: a role, its policy, an association, a researcher policy, two outputs;
# CloudFormation allows 500 resources and 200 outputs per stack.
MAX_TEAMS = 90


def researcher_policy_name(prefix: str, team: str, home_region: str) -> str:
    """IAM names are global: prefix and home region tell two deployments' policies apart."""
    return f"{prefix}-researcher-{team}-{home_region}"


# -- monitoring -----------------------------------------------------------------------

LOG_RETENTION_DAYS = 30
LAMBDA_ENVIRONMENT_LIMIT_BYTES = 4096

# -- CloudFormation's per-stack quotas ------------------------------------------------

# "Understand CloudFormation quotas" (CloudFormation User Guide): a template body in an
# S3 object is at most 1 MB, and the service refuses one over 1,000,000 bytes ("Template
# may not exceed 1000000 bytes in size"). CDK hands CloudFormation every template as its
# S3 asset's URL, so the 51,200-byte limit on an inline template body never applies.
TEMPLATE_MAX_BYTES = 1_000_000
# The same page: resources, outputs, parameters and mappings one template may declare.
TEMPLATE_MAX_RESOURCES = 500
TEMPLATE_MAX_OUTPUTS = 200
TEMPLATE_MAX_PARAMETERS = 200
TEMPLATE_MAX_MAPPINGS = 200
# Past this share of a quota a synthesis warns: a few more teams or buckets may not fit.
TEMPLATE_NEAR_LIMIT = 0.9
