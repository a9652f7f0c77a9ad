"""Where the local runtime's reconcile reads jobs' metric lines (services/metrics.py).

Real pods (local/processes.py) print into the endpoint's log group in the log agent's
layout: the CloudWatch adapter reads them there, as it reads a cluster's group in AWS.
Simulated pods run no code: a job given a known objective (a scenario arrival's
`objective`) has its lines played by local/cluster/metrics.py instead; any other
simulated job prints none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from squall.adapters.aws.metric_lines import CloudWatchMetricLines
from squall.core.jobs import Job
from squall.core.metrics import MetricLinesPage
from squall.local.aws import LocalResources, client
from squall.local.cluster.metrics import SimulatedMetricLines
from squall.ports import Cluster, MetricLines
from squall.services.metrics import NoMetricLines


def local_metric_lines(
    *,
    real_pods: bool,
    resources: LocalResources | None,
    clusters: Mapping[str, Cluster],
    simulated: SimulatedMetricLines | None = None,
) -> MetricLines:
    """The runtime's MetricLines: the simulated trainers' lines for the jobs given an objective
    (`simulated`), the endpoint's log group for real pods, else none."""
    logged: MetricLines | None = None
    if real_pods and resources is not None:
        logs = client("logs", resources.endpoint)
        logged = CloudWatchMetricLines(
            clusters=clusters,
            logs_client=lambda _cluster: logs,
            log_group_of=lambda _cluster: resources.log_group,
        )
    if simulated is None:
        return logged if logged is not None else NoMetricLines()
    return SimulatedFirst(simulated=simulated, logged=logged)


@dataclass(frozen=True)
class SimulatedFirst:
    """A job with a known objective reads its simulated trainer's lines; any other job its log
    stream's (real pods), if there is one."""

    simulated: SimulatedMetricLines
    logged: MetricLines | None = None

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        if self.simulated.objective_of(job) is not None:
            return self.simulated.read(job, cursor=cursor, limit=limit)
        if self.logged is not None:
            return self.logged.read(job, cursor=cursor, limit=limit)
        return MetricLinesPage(lines=(), cursor=cursor)
