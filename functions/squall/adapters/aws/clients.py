"""boto3 clients from the default chain (environment, profile, SSO, instance role), as the
`squall` command makes them: AWS_ENDPOINT_URL points them at the local endpoint."""

from __future__ import annotations

from typing import Any

import boto3

from squall.adapters.aws import errors


def aws_client(service: str, *, region: str | None = None) -> Any:
    """A client for `service` (in `region`; None: the default chain's region); Squall's error
    (PermanentError: no region, say) when none can be made."""
    if region is None:
        return errors.call(f"make a {service} client", boto3.client, service)
    return errors.call(f"make a {service} client in {region}", boto3.client, service, region_name=region)
