r"""The job spec's grammar and bounds: every pattern and limit in one place.

Every pattern is used with fullmatch: "$" would let a trailing newline through.
Every pattern that means ASCII says so (re.ASCII, and [0-9] for digits): `\d` and `\w`
alone take any script's digits and letters ("us-west-\u0662", "\u0661h"), which
Kubernetes and AWS refuse. S3_URI's `\S` is meant as Unicode: a key may hold any
non-space character, and Unicode spaces stay refused.
"""

from __future__ import annotations

import re
from datetime import timedelta

DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?", re.ASCII)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]", re.ASCII)
DURATION = re.compile(r"(?:([0-9]{1,9})d)?(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,12})s)?", re.ASCII)
S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?")
TRIAL_SUFFIX = re.compile(r"-t[0-9]+\Z", re.ASCII)

# Image references by the OCI distribution reference grammar
# (github.com/distribution/reference): [domain[:port]/]path[:tag][@digest].
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
MAX_IMAGE_LENGTH = 512
MAX_IMAGE_NAME_LENGTH = 255  # the distribution spec's limit on the repository name

# Kubernetes object names derive from the job id: "<id>-<type>-<index>" must stay a
# DNS-1123 label (63 characters), and sweep trials append "-t<nnn>" to the parent id.
MAX_NAME_LENGTH = 36
MAX_ID_LENGTH = 45
MAX_TRIAL_ID_LENGTH = MAX_ID_LENGTH + 5
REJECTED_PREFIX = "rejected-"  # ids of REJECTED records (intake derives them)

MAX_REPLICAS = {"chief": 1, "worker": 64, "ps": 16, "evaluator": 1}
MAX_CPU_MILLIS = 192_000
MAX_MEMORY_BYTES = 2 * 1024**4  # 2 TiB
MAX_GPUS = 16
# The operator may set another limit (cdk.json policy.maxRuntimeLimit); real multi-GPU
# training runs for weeks.
DEFAULT_MAX_RUNTIME_LIMIT = timedelta(days=30)
MAX_COMMAND = 64
MAX_ARGS = 256
MAX_ARG_LENGTH = 4096
MAX_ENV = 100
MAX_ENV_VALUE_LENGTH = 32_768
MAX_URI_LENGTH = 1024
MAX_SWEEP_TRIALS = 100
MAX_SWEEP_PARAMETERS = 10
MAX_SWEEP_VALUES = 100  # per parameter
MAX_SWEEP_VALUE_LENGTH = 1024  # as formatted into "--name=value" and SQUALL_PARAM_<NAME>
MAX_PARAMETER_NAME_LENGTH = 64
# A range's bounds (and step); whole numbers this large are still exact as floats.
MAX_RANGE_MAGNITUDE = 1e15
# Values of a range with a step (a grid indexes them; random and tpe draw one of them).
MAX_RANGE_VALUES = 1_000_000
# An objective's metric: a name as trials report it (core/metrics.py NAME, the same pattern).
METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}", re.ASCII)
MAX_METRIC_STEP = 10**15  # core/metrics.py MAX_STEP
NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# What one message may create in Kubernetes at once: a Job per replica, a Service per
# replica when distributed, times the sweep trials that start together. The submit
# function creates these within its timeout, ten messages to a batch.
MAX_OBJECTS_PER_MESSAGE = 200
# A recorded spec (the job's, and each trial's) as JSON; the job table's items stay
# far inside DynamoDB's 400 KB limit, and one message writes at most 101 of them.
MAX_RECORDED_SPEC_BYTES = 64 * 1024
# Bounds on the body's shape, far above any valid spec (a valid spec has at most a
# few thousand values, five levels deep); they bound the work of validating hostile
# bodies before pydantic sees them.
MAX_BODY_DEPTH = 16
MAX_BODY_VALUES = 10_000
RESERVED_ENV = ("TF_CONFIG", "SQUALL_")

# What an error report keeps: a REJECTED record must fit DynamoDB's item limit next
# to the body it records, however many problems a body has.
MAX_ISSUES = 50
MAX_ISSUE_FIELD_LENGTH = 200
MAX_ISSUE_MESSAGE_LENGTH = 500
MAX_ISSUES_JSON_BYTES = 48 * 1024
ISSUES_CONSIDERED = MAX_ISSUES * 4  # the rest of a huge body's errors are only counted

TF_PORT = 2222
