"""Print the Squall RBAC manifests (or aws-auth mapRoles) for the cdk.json settings.

python -m stacks.rbac | kubectl apply -f -
python -m stacks.rbac --aws-auth 123456789012
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
    if args.aws_auth:
        print(yaml.safe_dump(aws_auth_map_roles(config, args.aws_auth), sort_keys=False), end="")
    else:
        print(dump(render_rbac(config.teams)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
