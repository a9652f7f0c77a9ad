"""What the `squall` command and the SDK check a job spec with: the deployment's teams,
registries and policy, from the environment, then ./cdk.json's context, then the local
runtime's defaults; and the job spec files themselves (YAML or JSON), checked as the
submit function checks them.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from squall.cli.errors import CommandError
from squall.core import documents
from squall.planner.inputs import InputError, read_policy

if TYPE_CHECKING:
    from squall.core.spec import JobSpec
    from squall.planner.admission import TeamShare

CDK_JSON = Path("cdk.json")


def _context() -> dict[str, Any]:
    """./cdk.json's context; an unreadable cdk.json is an error, not a silent fallback to defaults."""
    if not CDK_JSON.exists():
        return {}
    document = load_document(str(CDK_JSON))
    context = document.get("context", {}) if isinstance(document, dict) else None
    if not isinstance(context, dict):
        raise CommandError(f"{CDK_JSON}: context: expected an object, got {documents.kind(context)}")
    return context


def _environment(name: str) -> Any | None:
    """A JSON value from the environment, None when the variable is not set."""
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        return documents.parse_json(text, source=name)
    except documents.DocumentError as exc:
        raise CommandError(f"{exc} (the variable holds JSON)") from exc


def configured_team_entries() -> dict[str, documents.Team]:
    """Teams as SQUALL_TEAMS (JSON) or cdk.json's `teams` declare them, else the local defaults.

    A team is a namespace, or {namespace, submitters, gpuQuota, weight, budget}.
    """
    found = _declared_teams()
    if found is None:
        from squall.local.runtime import DEFAULT_TEAMS

        found = DEFAULT_TEAMS, "the local defaults"
    value, source = found
    try:
        return documents.read_teams(value)
    except documents.ConfigError as exc:
        raise CommandError(f"{source}: " + "; ".join(exc.errors)) from exc


def _declared_teams() -> tuple[Any, str] | None:
    """SQUALL_TEAMS, else cdk.json's `teams`, with where it came from; None when neither declares any."""
    value = _environment("SQUALL_TEAMS")
    if value is not None:
        return value, "SQUALL_TEAMS"
    value = _context().get("teams")
    if value is None or value == {}:
        return None
    return value, f"{CDK_JSON}: context"


def configured_team_shares() -> dict[str, TeamShare]:
    """Each declared team's GPU quota and weight for admission (planner TeamShare); none declared: none.

    The local default teams have neither, which admits exactly as no teams do, so they
    are not read (and the plan command does not import the local runtime for them).
    """
    from squall.planner.inputs import team_shares

    return team_shares(configured_team_entries()) if _declared_teams() is not None else {}


def configured_teams() -> dict[str, str]:
    """team -> namespace."""
    return {team: entry.namespace for team, entry in configured_team_entries().items()}


def configured_registries() -> list[str]:
    value = _environment("SQUALL_ALLOWED_REGISTRIES")
    source = "SQUALL_ALLOWED_REGISTRIES"
    if value is None:
        value, source = _context().get("allowedRegistries"), f"{CDK_JSON}: allowedRegistries"
        if value is None or value == []:
            from squall.local.runtime import DEFAULT_REGISTRIES

            return list(DEFAULT_REGISTRIES)
    if not isinstance(value, list) or not value or not all(isinstance(r, str) and r.strip() for r in value):
        raise CommandError(
            f"{source}: expected a non-empty list of registry prefixes (strings), got {documents.shown(value)}"
        )
    return list(value)


def configured_policy(path: str | None = None) -> dict[str, Any]:
    """The policy's values (planner/inputs.py read_policy) in a file (`--policy`: cdk.json, {policy: {...}} or the policy object itself),
    else ./cdk.json's, read as `cdk synth` and the functions read it; else the defaults."""
    if path is None:
        value, source = _context().get("policy"), str(CDK_JSON)
    else:
        document, source = load_document(path), path
        holder = document.get("context") if isinstance(document, dict) else None
        if isinstance(holder, dict):
            value = holder.get("policy")
        elif isinstance(document, dict) and "policy" in document:
            value = document["policy"]
        else:
            value = document
    try:
        return read_policy(value)
    except InputError as exc:
        raise CommandError(f"{source}: " + "; ".join(exc.errors)) from exc


def configured_max_runtime_limit() -> timedelta:
    """cdk.json's policy.maxRuntimeLimit, read as the functions read it; else the default."""
    limit: timedelta = configured_policy()["max_runtime_limit"]
    return limit


def load_document(path: str) -> Any:
    """A YAML or JSON file (`-` for standard input)."""
    try:
        return documents.load(path)
    except documents.DocumentError as exc:
        raise CommandError(str(exc)) from exc


def load_spec(path: str, *, job_id: str | None = None) -> tuple[JobSpec, Any]:
    """The job spec in a file, checked as the submit function checks it; `job_id` replaces its id."""
    data = load_document(path)
    if job_id is not None and isinstance(data, dict):
        data = {**data, "id": job_id}
    return check_spec(data, source=path), data


def check_spec(data: Any, *, source: str) -> JobSpec:
    """A job spec's body checked as the submit function checks it; `source` names it in errors."""
    from squall.core.spec import SpecError, parse_spec

    teams, registries, limit = configured_teams(), configured_registries(), configured_max_runtime_limit()
    try:
        return parse_spec(data, teams=teams, registries=registries, max_runtime_limit=limit)
    except SpecError as exc:
        total = getattr(exc, "total", len(exc.issues))
        lines = [f"{source}: invalid job spec ({total} error{'s' if total != 1 else ''})"]
        lines += [f"  {issue.field}: {issue.message}" for issue in exc.issues]
        raise CommandError("\n".join(lines)) from exc
