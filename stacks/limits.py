"""CloudFormation's per-stack quotas, measured on the templates a synthesis writes.

CloudFormation refuses a template over one of its quotas (``Template may not exceed
1000000 bytes in size``, more than 500 resources or 200 outputs), but only when the
stack is deployed, and the settings allow a configuration (90 teams with long names,
a handful of ``artifacts.buckets``) whose workloads template is over. So every
synthesis of the app measures each template file it wrote into the cloud assembly,
the file CDK uploads and CloudFormation reads, and refuses the first one over a quota
with the stack, the quota, the measured value and the settings that make that stack
grow; one near a quota is reported as a warning.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import cx_api

from stacks import constants
from stacks.config import SquallConfig
from stacks.deployment import SquallStacks


@dataclass(frozen=True)
class Quota:
    """One per-template quota: a section's entries, or (``section`` None) the file's bytes."""

    section: str | None
    what: str
    limit: int


QUOTAS = (
    Quota(None, "bytes", constants.TEMPLATE_MAX_BYTES),
    Quota("Resources", "resources", constants.TEMPLATE_MAX_RESOURCES),
    Quota("Outputs", "outputs", constants.TEMPLATE_MAX_OUTPUTS),
    Quota("Parameters", "parameters", constants.TEMPLATE_MAX_PARAMETERS),
    Quota("Mappings", "mappings", constants.TEMPLATE_MAX_MAPPINGS),
)


@dataclass(frozen=True)
class Measured:
    """One stack's template as CloudFormation would receive it."""

    stack: str
    size: int
    template: Mapping[str, Any] = field(repr=False, compare=False)

    def value(self, quota: Quota) -> int:
        if quota.section is None:
            return self.size
        return len(self.template.get(quota.section) or {})


def measure(stack: str, path: Path) -> Measured:
    data = path.read_bytes()
    return Measured(stack=stack, size=len(data), template=json.loads(data))


@dataclass(frozen=True)
class Finding:
    measured: Measured
    quota: Quota
    value: int

    @property
    def over(self) -> bool:
        return self.value > self.quota.limit


def findings(measured: Measured, *, near: float = constants.TEMPLATE_NEAR_LIMIT) -> list[Finding]:
    """The quotas this template is over, or past ``near`` of."""
    found = [Finding(measured, quota, measured.value(quota)) for quota in QUOTAS]
    return [f for f in found if f.value > near * f.quota.limit]


class TemplateLimitError(Exception):
    """A synthesised template CloudFormation would refuse; one paragraph per stack."""

    def __init__(self, paragraphs: list[str]) -> None:
        self.paragraphs = paragraphs
        super().__init__("\n\n".join(paragraphs))


def check_templates(templates: Mapping[str, Path], *, scaling: Mapping[str, str]) -> list[str]:
    """Raise TemplateLimitError if a template is over a quota; else one warning per quota one is near.

    ``templates``: stack name -> its template file; ``scaling``: stack name -> the
    settings that make it grow (``scaling_settings``).
    """
    over: dict[str, list[Finding]] = {}
    warnings = []
    for stack, path in templates.items():
        for finding in findings(measure(stack, path)):
            if finding.over:
                over.setdefault(stack, []).append(finding)
            else:
                warnings.append(_near(finding, scaling.get(stack)))
    if over:
        raise TemplateLimitError([_refusal(found, scaling.get(stack)) for stack, found in over.items()])
    return warnings


def check_assembly(assembly: cx_api.CloudAssembly, *, scaling: Mapping[str, str]) -> list[str]:
    """``check_templates`` on every stack of a synthesised cloud assembly."""
    templates = {s.stack_name: Path(s.template_full_path) for s in assembly.stacks_recursively}
    return check_templates(templates, scaling=scaling)


def scaling_settings(config: SquallConfig, stacks: SquallStacks) -> dict[str, str]:
    """Stack name -> the cdk.json settings its template grows with, as this configuration sets them."""
    teams = config.teams
    buckets = config.artifacts.buckets
    groups = len(config.node_groups)
    submitters = {arn for team in config.team_configs.values() for arn in team.submitter_arns}
    found = {
        stacks.workloads.stack_name: (
            f"teams ({len(teams)} teams, names up to {_longest(teams)} characters, namespaces up to "
            f"{_longest(teams.values())}), artifacts.buckets ({_buckets(buckets)}) and clusters "
            f"({len(config.clusters)}): each team adds a "
            "job role, a pod identity association, a researcher policy and their outputs, each naming "
            "the team and its namespace, each bucket adds statements to every team's role and policy, "
            "and each cluster adds its log group (three ARNs) to every team's researcher policy"
        ),
        stacks.control_plane.stack_name: (
            f"nodeGroups ({groups} groups, named in the triggers' rules) and the teams' submitters "
            f"({len(submitters)} principals, named in the jobs queue's policy)"
        ),
        stacks.monitoring.stack_name: (
            f"nodeGroups ({groups} groups) and teams ({len(teams)} teams): the dashboard has widgets for each"
        ),
    }
    for region, stack in stacks.capacity.items():
        found[stack.stack_name] = (
            f"nodeGroups in {region} ({len(config.groups_in(region))} groups): each adds its hooks, "
            "and its group and launch template where Squall creates the groups"
        )
    for name, cluster_stack in stacks.clusters.items():
        found[cluster_stack.stack_name] = (
            f"teams ({len(teams)} teams, namespaces up to {_longest(teams.values())} characters): each team "
            f"namespace adds a job role, a pod identity association and an output on cluster {name}"
        )
    for region, forwarding in stacks.forwarding.items():
        found[forwarding.stack_name] = (
            f"nodeGroups in {region} ({len(config.groups_in(region))} groups, named in the forwarding rules)"
        )
    return found


def _refusal(over: list[Finding], scaling: str | None) -> str:
    measured = over[0].measured
    quotas = "; ".join(
        f"{f.value:,} {f.quota.what}, over CloudFormation's limit of {f.quota.limit:,} {f.quota.what} per template"
        for f in over
    )
    parts = _largest_parts(measured.template, by_size=any(f.quota.section is None for f in over))
    return " ".join(
        sentence
        for sentence in (
            f"{measured.stack}: CloudFormation would refuse this stack's template: {quotas}.",
            f"It grows with {scaling}." if scaling else "",
            f"Largest parts: {parts}." if parts else "",
            "Fewer of those (or, for the size, shorter names) bring it under.",
        )
        if sentence
    )


def _near(finding: Finding, scaling: str | None) -> str:
    share = finding.value / finding.quota.limit
    grows = f"; it grows with {scaling}" if scaling else ""
    return (
        f"{finding.measured.stack}: {finding.value:,} {finding.quota.what}, {share:.1%} of CloudFormation's "
        f"limit of {finding.quota.limit:,} per template{grows}"
    )


def _largest_parts(template: Mapping[str, Any], *, by_size: bool, top: int = 3) -> str:
    """The resource types that take most of the template (its bytes, else its resources)."""
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for logical_id, resource in (template.get("Resources") or {}).items():
        kind = str(resource.get("Type", "?"))
        count[kind] += 1
        size[kind] += _json_bytes({logical_id: resource})
    if by_size:
        outputs = template.get("Outputs") or {}
        if outputs:
            count["outputs"] = len(outputs)
            size["outputs"] = _json_bytes(outputs)
        return ", ".join(f"{count[k]} {k} (about {size[k]:,} bytes)" for k, _ in size.most_common(top))
    return ", ".join(f"{n} {k}" for k, n in count.most_common(top))


def _json_bytes(value: object) -> int:
    # CDK writes templates as JSON.stringify(template, undefined, 1) does.
    return len(json.dumps(value, indent=1, ensure_ascii=False).encode())


def _buckets(names: tuple[str, ...]) -> str:
    return f"{len(names)} buckets, names up to {_longest(names)} characters" if names else "none"


def _longest(names: Iterable[str]) -> int:
    return max((len(name) for name in names), default=0)
