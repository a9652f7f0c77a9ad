"""Where the cluster's log agent puts a container's output in CloudWatch Logs.

The Amazon CloudWatch Observability EKS add-on (Fluent Bit, Container Insights'
`application-log.conf`) tails `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`
on every node, tags each file `application.var.log.containers.<file>`, and writes it to
the log group `/aws/containerinsights/<cluster>/application` under the stream
`<node host name>-<tag>`. `squall logs` reads that layout; the local runtime writes its
real pods' output in it, so the same reader serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOG_GROUP_TEMPLATE = "/aws/containerinsights/{cluster}/application"

# Kubernetes names: pods and namespaces are DNS subdomains/labels (no "_"), containers
# DNS labels, so "_" separates them unambiguously; the container id is hex.
_STREAM = re.compile(
    r"^(?P<host>.+?)-application\.var\.log\.containers\."
    r"(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<namespace>[a-z0-9][a-z0-9-]*)_(?P<container>[a-z0-9][a-z0-9-]*)"
    r"-(?P<container_id>[0-9a-f]+)\.log$"
)


def log_group(cluster: str) -> str:
    """The application log group of `cluster`."""
    return LOG_GROUP_TEMPLATE.format(cluster=cluster)


@dataclass(frozen=True)
class ContainerStream:
    """One container run's log stream: a restarted container gets a new id, so a new stream."""

    host: str
    pod: str
    namespace: str
    container: str
    container_id: str

    @property
    def name(self) -> str:
        return (
            f"{self.host}-application.var.log.containers."
            f"{self.pod}_{self.namespace}_{self.container}-{self.container_id}.log"
        )


def stream_prefix(host: str, pod: str, namespace: str) -> str:
    """The prefix every stream of `pod` on `host` starts with (for DescribeLogStreams)."""
    return f"{host}-application.var.log.containers.{pod}_{namespace}_"


def parse_stream(name: str) -> ContainerStream | None:
    """The parts of a log agent stream name, None for a stream of another layout."""
    match = _STREAM.match(name)
    if match is None:
        return None
    return ContainerStream(**match.groupdict())
