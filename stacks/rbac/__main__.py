"""Print the Squall RBAC manifests (or aws-auth mapRoles) for the cdk.json settings.

python -m stacks.rbac | kubectl apply -f -
python -m stacks.rbac --aws-auth 123456789012

Every cluster gets the same RBAC (and the same mapRoles): apply it to each one
(kubectl --context <cluster> apply -f -). With more than one cluster configured,
the output starts with a comment that names them.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from stacks.config import ConfigError, SquallConfig, load_cdk_json_context
from stacks.rbac import aws_auth_map_roles, dump, render_rbac


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.rbac", description=__doc__)
    parser.add_argument(
        "--aws-auth",
        metavar="ACCOUNT",
        help="print aws-auth mapRoles entries for this account instead of RBAC manifests",
    )
    args = parser.parse_args(argv)
    try:
        config = SquallConfig.from_context(load_cdk_json_context())
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(each_cluster_note(config), end="")
    if args.aws_auth:
        print(yaml.safe_dump(aws_auth_map_roles(config, args.aws_auth), sort_keys=False), end="")
    else:
        print(dump(render_rbac(config.teams)), end="")
    return 0


def each_cluster_note(config: SquallConfig) -> str:
    """A YAML comment naming the clusters to apply the output to, when there is more than one."""
    if len(config.clusters) < 2:
        return ""
    names = ", ".join(f"{c.name} ({c.region})" for c in config.clusters)
    return f"# Every cluster gets the same: apply this to each of {names}.\n"


if __name__ == "__main__":
    raise SystemExit(main())
