"""Where the local runtime's reconcile reads jobs' metric lines (services/metrics.py).

Real pods (local/processes.py) print into the endpoint's log group in the log agent's
layout: the CloudWatch adapter reads them there, as it reads a cluster's group in AWS.
Simulated pods print nothing: no lines (the simulated clusters' own metric lines plug in here).
"""

from __future__ import annotations

from collections.abc import Mapping

from squall.adapters.aws.metric_lines import CloudWatchMetricLines
from squall.local.aws import LocalResources, client
from squall.ports import Cluster, MetricLines
from squall.services.metrics import NoMetricLines


def local_metric_lines(
    *, real_pods: bool, resources: LocalResources | None, clusters: Mapping[str, Cluster]
) -> MetricLines:
    """The runtime's MetricLines: the endpoint's log group for real pods, else none."""
    if real_pods and resources is not None:
        logs = client("logs", resources.endpoint)
        return CloudWatchMetricLines(
            clusters=clusters,
            logs_client=lambda _cluster: logs,
            log_group_of=lambda _cluster: resources.log_group,
        )
    return NoMetricLines()
