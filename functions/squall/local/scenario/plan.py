"""A scenario compiled: the ScenarioPlan a Simulation runs, every arrival checked as Squall will check it.

`compile_scenario` takes a scenario document (models.py checks its shape), reads its
node groups, teams (namespaces, submitters, GPU quotas, weights and monthly budgets) and
policy with the readers cdk synth uses (squall/planner/inputs.py), checks each arrival's
spec as the submit function will, and lays out the submissions in time order. Trace replay (local/trace.py) builds a ScenarioPlan from a CSV instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from squall.core import documents
from squall.core.settings import PolicySettings, may_submit
from squall.core.spec import JobSpec, SpecError, parse_spec
from squall.local.clock import EPOCH
from squall.local.cluster.metrics import ParameterOptimum, SyntheticObjective
from squall.local.fleet import RegionCapacity
from squall.local.runtime import DEFAULT_REGISTRIES, DEFAULT_TEAMS, ClusterEntry, default_clusters
from squall.local.scenario.models import (
    ArrivalModel,
    EndModel,
    Expect,
    ObjectiveModel,
    ScenarioError,
    ScenarioModel,
    validation_errors,
)
from squall.planner import NodeGroup
from squall.planner.admission import TeamShare
from squall.planner.inputs import (
    GroupsError,
    InputError,
    read_node_groups,
    read_policy,
    read_teams,
    team_budgets,
    team_shares,
)


@dataclass(frozen=True)
class PlannedSubmission:
    """One message for the jobs queue, and how its job's pods behave."""

    at: timedelta
    body: str
    expect: Expect = "accepted"
    job_id: str | None = None  # known in advance when the spec names its id
    spec: JobSpec | None = None  # else derived from the message id, as Squall derives it
    run_for: timedelta | None = None
    exit_code: int = 0
    deliver_twice: bool = False
    sender: str | None = None  # the SenderId SQS reports for it
    checkpoint_every: timedelta | None = None  # how often its job checkpoints; None: never
    objective: SyntheticObjective | None = None  # what its trainer reports (metric lines); None: nothing


@dataclass(frozen=True)
class ScenarioPlan:
    name: str
    node_groups: list[dict[str, Any]]
    groups: list[NodeGroup]
    capacity: dict[str, RegionCapacity]
    policy: PolicySettings
    teams: dict[str, str]
    registries: list[str]
    submissions: list[PlannedSubmission]
    faults: list[Any] = field(default_factory=list)  # Fault models, by time
    end: EndModel = field(default_factory=EndModel)
    speed: float | None = None  # virtual seconds per wall second; None: as fast as possible
    start: datetime = EPOCH
    default_run_time: timedelta = timedelta(minutes=3)
    description: str = ""
    # team -> unique ids of the principals that may submit for it; a team left out is open to
    # all while no team names submitters, closed once one does (core/settings.py may_submit).
    submitters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # team -> its GPU quota and weight in admission; a team left out has no quota and weight 1.
    quotas: dict[str, TeamShare] = field(default_factory=dict)
    # team -> dollars it may spend a calendar month; a team left out has no budget.
    budgets: dict[str, float] = field(default_factory=dict)
    # The clusters, in preference order (empty: the runtime's one default cluster).
    clusters: list[ClusterEntry] = field(default_factory=list)


def load_document(path: Path) -> Any:
    """A scenario, groups or spec file (YAML or JSON, see squall.core.documents)."""
    try:
        return documents.load(path)
    except documents.DocumentError as exc:
        where = f"line {exc.line}, column {exc.column}: " if exc.line is not None else ""
        raise ScenarioError([where + exc.message], source=str(path)) from exc


def load_scenario(path: str | Path) -> ScenarioPlan:
    """Read and check a scenario file; ScenarioError lists every problem with its field."""
    path = Path(path)
    return compile_scenario(load_document(path), base=path.parent, source=str(path))


def compile_scenario(document: Any, *, base: Path = Path("."), source: str = "") -> ScenarioPlan:
    if not isinstance(document, dict):
        raise ScenarioError(
            [
                f"(scenario): expected an object with name, arrivals and the rest, got {documents.kind(document)}"
            ],
            source=source,
        )
    try:
        model = ScenarioModel.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(validation_errors(exc), source=source) from exc
    errors: list[str] = []
    policy = read_policy_settings(model.policy, errors)
    raw_groups = _node_groups(model.node_groups, base=base, errors=errors)
    groups = _parse_groups(raw_groups, errors)
    try:
        entries = read_teams(model.teams or DEFAULT_TEAMS, unique_ids_only=True)
    except InputError as exc:
        errors.extend(exc.errors)
        entries = {}
    teams = {name: entry.namespace for name, entry in entries.items()}
    quotas = team_shares(entries)
    budgets = team_budgets(entries)
    submitters = {name: entry.submitters for name, entry in entries.items() if entry.submitters is not None}
    registries = list(model.registries or DEFAULT_REGISTRIES)
    capacity = {
        region: RegionCapacity(instances=dict(r.capacity), boot_time=r.boot_time)
        for region, r in model.regions.items()
    }
    _check_places(model, groups, errors)
    clusters = _clusters(model, raw_groups, errors)
    rng = random.Random(model.seed)
    submissions = _submissions(
        model,
        base=base,
        rules=_Rules(
            teams=teams,
            registries=registries,
            submitters=submitters,
            max_runtime_limit=policy.max_runtime_limit,
            quotas=quotas,
        ),
        rng=rng,
        errors=errors,
    )
    if errors:
        raise ScenarioError(errors, source=source)
    return ScenarioPlan(
        name=model.name,
        description=model.description,
        node_groups=raw_groups,
        groups=groups,
        capacity=capacity,
        policy=policy,
        teams=teams,
        registries=registries,
        submissions=sorted(submissions, key=lambda s: s.at),
        faults=sorted(model.faults, key=lambda f: f.at),
        end=model.end,
        speed=None if model.clock.speed == "max" else float(model.clock.speed),
        start=model.clock.start,
        default_run_time=model.default_run_time,
        submitters=submitters,
        quotas=quotas,
        budgets=budgets,
        clusters=clusters,
    )


def read_clusters(
    named: Sequence[tuple[str, str]] | None, raw_groups: Sequence[Any], errors: list[str]
) -> list[ClusterEntry]:
    """The clusters of a scenario or groups file, and their node groups checked against them.

    `named`: the file's `clusters` as (name, region) pairs, None when it has none: then
    there is one, `default_clusters`. With more than one, every group names its cluster;
    a group's cluster must be one of them. Problems join `errors`, naming the field.
    """
    entries = (
        [ClusterEntry(name=name, region=region) for name, region in named]
        if named
        else default_clusters([g for g in raw_groups if isinstance(g, Mapping)])
    )
    names = [e.name for e in entries]
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            errors.append(f"clusters[{index}].name: {name} is named twice")
        seen.add(name)
    listed = ", ".join(names)
    for index, raw in enumerate(raw_groups):
        if not isinstance(raw, Mapping):
            continue  # read_node_groups names it
        cluster = raw.get("cluster")
        where = f"nodeGroups[{index}].cluster"
        if cluster is None:
            if len(entries) > 1:
                errors.append(f"{where}: required when there is more than one cluster (one of {listed})")
        elif not isinstance(cluster, str):
            continue  # read_node_groups names it
        elif cluster not in seen:
            hint = "" if named else " (list the clusters under clusters: [{name, region}])"
            errors.append(f"{where}: {documents.shown(cluster)} is not one of the clusters ({listed}){hint}")
    return entries


def _clusters(
    model: ScenarioModel, raw_groups: list[dict[str, Any]], errors: list[str]
) -> list[ClusterEntry]:
    named = [(c.name, c.region) for c in model.clusters] if model.clusters is not None else None
    if named is not None and not named:
        errors.append("clusters: give at least one cluster, or leave clusters out for one")
    entries = read_clusters(named, raw_groups, errors)
    names = {e.name for e in entries}
    for index, fault in enumerate(model.faults):
        cluster: str | None = getattr(fault, "cluster", None)
        if cluster is not None and cluster not in names:
            errors.append(
                f"faults[{index}].cluster: {documents.shown(cluster)} is not one of the clusters "
                f"({', '.join(e.name for e in entries)})"
            )
    return entries


@dataclass(frozen=True)
class _Rules:
    """What the intake of the scenario's runtime checks a spec against."""

    teams: dict[str, str]
    registries: list[str]
    submitters: dict[str, tuple[str, ...]]
    max_runtime_limit: timedelta
    quotas: dict[str, TeamShare] = field(default_factory=dict)

    def may_send(self, team: str, sender: str | None) -> bool:
        return may_submit(self.submitters, team=team, principal=sender.split(":", 1)[0] if sender else None)


def _node_groups(
    value: list[dict[str, Any]] | str | None, *, base: Path, errors: list[str]
) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return value
    path = Path("cdk.json") if value is None else base / value
    if not path.exists():
        errors.append(f"nodeGroups: {path} does not exist (give a list, or a file with nodeGroups)")
        return []
    document = load_document(path)
    holder = document.get("context", document) if isinstance(document, dict) else {}
    found = holder.get("nodeGroups") if isinstance(holder, dict) else None
    if not isinstance(found, list):
        errors.append(f"nodeGroups: {path} has no nodeGroups list")
        return []
    return found


def read_policy_settings(raw: object, errors: list[str]) -> PolicySettings:
    """A scenario's or groups file's policy, read as cdk synth reads it; its problems join `errors`."""
    try:
        return PolicySettings.model_validate(read_policy(raw))
    except InputError as exc:
        errors.extend(exc.errors)
        return PolicySettings()


def _parse_groups(raw: list[dict[str, Any]], errors: list[str]) -> list[NodeGroup]:
    if not raw:
        if not any(e.startswith("nodeGroups") for e in errors):
            errors.append("nodeGroups: at least one node group is needed")
        return []
    try:
        groups, _ = read_node_groups(raw)
    except GroupsError as exc:
        errors.extend(str(e) for e in exc.errors)
        return []
    return groups


def _check_places(model: ScenarioModel, groups: list[NodeGroup], errors: list[str]) -> None:
    """Faults and regions must name regions and groups the scenario has."""
    regions = {g.region for g in groups}
    names = {g.name for g in groups} | {g.asg_name for g in groups if g.asg_name}
    if groups:
        for name in model.regions:
            if name not in regions:
                errors.append(f"regions.{name}: no node group is in this region")
        for index, fault in enumerate(model.faults):
            region: str | None = getattr(fault, "region", None)
            if region is not None and region not in regions:
                errors.append(f"faults[{index}].region: no node group is in {region}")
            group = getattr(fault, "group", None)
            if group is not None and group not in names:
                errors.append(f"faults[{index}].group: no node group {group}")


def _submissions(
    model: ScenarioModel, *, base: Path, rules: _Rules, rng: random.Random, errors: list[str]
) -> list[PlannedSubmission]:
    submissions: list[PlannedSubmission] = []
    accepted_ids: set[str] = set()
    for index, arrival in enumerate(model.arrivals):
        where = f"arrivals[{index}]"
        if arrival.body is not None:
            bodies: list[tuple[str, JobSpec | None]] = [(arrival.body, None)] * arrival.count
            if arrival.expect == "accepted":
                errors.append(f"{where}.expect: a raw body cannot be expected to make a job")
            submissions.extend(_copies(arrival, bodies, model, rng))
            continue
        if arrival.expect == "deadLetter":
            errors.append(f"{where}.expect: only a raw body can end in the dead-letter queue")
            continue
        data = (
            arrival.spec if arrival.spec is not None else _spec_file(base, arrival.spec_file, where, errors)
        )
        if data is None:
            continue
        spec = _check_spec(data, arrival=arrival, where=where, rules=rules, errors=errors)
        copies: list[tuple[str, JobSpec | None]] = []
        for number in range(1, arrival.count + 1):
            copy = dict(data)
            if spec is not None and spec.id and arrival.count > 1:
                copy["id"] = f"{spec.id}-{number}"
            parsed = spec.model_copy(update={"id": copy["id"]}) if spec is not None and spec.id else spec
            copies.append((json.dumps(copy), parsed))
            if parsed is not None and parsed.id:
                _check_id(parsed.id, arrival.expect, accepted_ids, where, errors)
        submissions.extend(_copies(arrival, copies, model, rng))
    return submissions


def _copies(
    arrival: ArrivalModel, bodies: list[tuple[str, JobSpec | None]], model: ScenarioModel, rng: random.Random
) -> Iterator[PlannedSubmission]:
    for number, (body, spec) in enumerate(bodies):
        fails = arrival.failure_probability > 0 and rng.random() < arrival.failure_probability
        yield PlannedSubmission(
            at=arrival.at + number * arrival.every,
            body=body,
            expect=arrival.expect,
            job_id=spec.id if spec is not None and spec.id else None,
            spec=spec,
            run_for=arrival.run_time or model.default_run_time,
            exit_code=1 if fails else 0,
            deliver_twice=arrival.deliver_twice,
            sender=arrival.sender,
            checkpoint_every=arrival.checkpoint_every,
            objective=synthetic_objective(arrival.objective),
        )


def synthetic_objective(model: ObjectiveModel | None) -> SyntheticObjective | None:
    """A scenario's objective as the simulated metric lines play it (checked by its model)."""
    if model is None:
        return None
    return SyntheticObjective(
        parameters={
            name: ParameterOptimum(optimum=p.optimum, width=p.width, log=p.log, penalty=p.penalty)
            for name, p in model.parameters.items()
        },
        metric=model.metric,
        goal=model.goal,
        best=model.best,
        floor=model.floor,
        steps=model.steps,
        rise=model.rise,
        log_every=model.log_every,
        eval_every=model.eval_every,
        noise=model.noise,
        seed=model.seed,
    )


def _spec_file(base: Path, name: str | None, where: str, errors: list[str]) -> dict[str, Any] | None:
    path = base / str(name)
    if not path.exists():
        errors.append(f"{where}.specFile: {path} does not exist")
        return None
    document = load_document(path)
    if not isinstance(document, dict):
        errors.append(f"{where}.specFile: {path} does not hold a job spec (a mapping)")
        return None
    return document


def _check_spec(
    data: dict[str, Any], *, arrival: ArrivalModel, where: str, rules: _Rules, errors: list[str]
) -> JobSpec | None:
    """The spec, when Squall will accept it; the arrival's `expect` must agree with what Squall will do."""
    expect = arrival.expect
    try:
        spec = parse_spec(
            data,
            teams=list(rules.teams),
            registries=rules.registries,
            max_runtime_limit=rules.max_runtime_limit,
        )
    except SpecError as exc:
        if expect != "rejected":
            errors.extend(f"{where}.spec.{issue.field}: {issue.message}" for issue in exc.issues)
        return None
    if not rules.may_send(spec.team, arrival.sender):
        if expect != "rejected":
            sender = arrival.sender or "an arrival without a sender (the runtime's default principal)"
            errors.append(
                f"{where}.sender: {sender} may not submit for team {spec.team} (its submitters: "
                f"{', '.join(rules.submitters.get(spec.team, ())) or 'none, while other teams name theirs'}); "
                "Squall will reject it (expect: rejected?)"
            )
        return None
    if expect == "rejected":
        errors.append(f"{where}.expect: the spec is valid, Squall will not reject it")
    quota = rules.quotas[spec.team].quota if spec.team in rules.quotas else None
    if expect == "accepted" and quota is not None and spec.total_gpus() > quota:
        errors.append(
            f"{where}.spec: the job needs {spec.total_gpus()} GPUs, more than team {spec.team}'s gpuQuota "
            f"of {quota}: it would wait forever"
        )
    return spec


def _check_id(job_id: str, expect: Expect, accepted: set[str], where: str, errors: list[str]) -> None:
    if expect == "duplicate":
        if job_id not in accepted:
            errors.append(f"{where}.spec.id: a duplicate must reuse the id of an earlier accepted arrival")
    elif expect == "accepted":
        if job_id in accepted:
            errors.append(f"{where}.spec.id: {job_id} is used by an earlier arrival (expect: duplicate?)")
        accepted.add(job_id)
