"""Who is who, looked up once per cold start: IAM principals and the EKS cluster.

SQS reports a message's sender as the principal's *unique id* (``AROA...`` for a
role, then ``:<session>``; ``AIDA...`` for a user), not its ARN, while the
deployment names a team's submitters by ARN. ``unique_ids`` asks IAM (GetRole,
GetUser) for each ARN's id; an entry that is an id already is taken as it is.
A role deleted and created again under the same name gets a new id, so a stale
grant cannot outlive the role it was given to.

The cluster's certificate authority, when the settings leave it out, comes from
EKS DescribeCluster: the functions cannot verify the API server without it.

Every botocore error leaves as Squall's own, through squall.adapters.aws.errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from squall.adapters.aws.errors import not_found, translated
from squall.core.errors import NotFoundError, PermanentError, RetryableError
from squall.planner.inputs import IAM_PRINCIPAL_ARN, IAM_UNIQUE_ID

# The one grammar of a submitter (planner/inputs.py): ASCII, and matched whole here, so a
# trailing newline or another script's digits name no principal.
PRINCIPAL_ARN = IAM_PRINCIPAL_ARN
UNIQUE_ID = IAM_UNIQUE_ID
_NOT_FOUND = (not_found("NoSuchEntity", "ResourceNotFoundException"),)


class IamPrincipals:
    """Unique ids of IAM roles and users, by ARN (IAM GetRole / GetUser)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def unique_id(self, principal: str) -> str:
        """The unique id SQS reports for ``principal`` (an ARN, or a unique id already)."""
        if UNIQUE_ID.fullmatch(principal):
            return principal
        match = PRINCIPAL_ARN.fullmatch(principal)
        if match is None:
            raise PermanentError(
                f"{principal!r} is not an IAM role or user ARN, nor a unique id (AROA..., AIDA...)"
            )
        name = match["name"]
        with translated(f"look up {principal}", rules=_NOT_FOUND):
            if match["kind"] == "role":
                found = self._client.get_role(RoleName=name)["Role"]
                arn, unique_id = found["Arn"], found["RoleId"]
            else:
                found = self._client.get_user(UserName=name)["User"]
                arn, unique_id = found["Arn"], found["UserId"]
        # Same name, other path or account: not the principal the deployment named.
        if arn.lower() != principal.lower():
            raise NotFoundError(f"look up {principal}: IAM knows {name} as {arn}")
        return str(unique_id)


@dataclass(frozen=True)
class Submitters:
    """Team -> unique ids of its submitters, and the principals that could not be resolved."""

    by_team: dict[str, frozenset[str]]
    unresolved: dict[str, str]  # principal -> why


def resolve_submitters(principals: Mapping[str, Sequence[str]], lookup: IamPrincipals) -> Submitters:
    """Every team's submitters as unique ids, each principal looked up once.

    A principal IAM does not know (deleted, renamed, a typo) is left out of its
    team and reported: its team stays restricted to the others, it never opens.
    A transient IAM error is raised (RetryableError): the invocation fails and
    its messages come back, rather than being judged on half the list.
    """
    resolved: dict[str, str] = {}
    unresolved: dict[str, str] = {}
    for principal in _unique(p for team in principals.values() for p in team):
        try:
            resolved[principal] = lookup.unique_id(principal)
        except PermanentError as exc:
            unresolved[principal] = str(exc)
    by_team = {
        team: frozenset(resolved[p] for p in members if p in resolved) for team, members in principals.items()
    }
    return Submitters(by_team=by_team, unresolved=unresolved)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class ClusterEndpoint:
    endpoint: str
    certificate_authority: str  # base64 PEM, as DescribeCluster returns it


def describe_cluster(client: Any, name: str) -> ClusterEndpoint:
    """The API endpoint and certificate authority of an EKS cluster (eks:DescribeCluster)."""
    with translated(f"describe EKS cluster {name}", rules=_NOT_FOUND):
        cluster = client.describe_cluster(name=name)["cluster"]
    authority = (cluster.get("certificateAuthority") or {}).get("data") or ""
    endpoint = cluster.get("endpoint") or ""
    if not authority or not endpoint:
        raise RetryableError(f"describe EKS cluster {name}: no endpoint or certificate yet (status {cluster.get('status')})")
    return ClusterEndpoint(endpoint=str(endpoint), certificate_authority=str(authority))
