#!/usr/bin/env python3
"""The Squall CDK app: every stack, built from the settings in cdk.json.

    cdk deploy --all                     bundles the Lambda asset (pip, no Docker)
    python app.py                        offline check: synthesises every stack into
                                         cdk.out without bundling, runs cdk-nag,
                                         exits non-zero on any error

Run directly, the app reads cdk.json's context itself (the CDK CLI passes it
when it runs the app) and skips bundling: the CLI always says which stacks to
bundle (context aws:cdk:bundling-stacks), and what it says wins.
"""

from __future__ import annotations

import os
import sys

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.config import ConfigError, SquallConfig, load_cdk_json_context
from stacks.deployment import SquallStacks, build

BUNDLING_STACKS = "aws:cdk:bundling-stacks"


def create_app(
    *, context: dict[str, object] | None = None, outdir: str | None = None
) -> tuple[cdk.App, SquallStacks]:
    """The app with cdk-nag's AwsSolutions checks; `context` overrides cdk.json."""
    # No bundling unless asked: pip needs the network, and a synthesis check does
    # not need the dependencies.
    defaults = {BUNDLING_STACKS: [], **load_cdk_json_context(), **(context or {})}
    # Constructor context is the lowest layer: the CLI's (cdk.json, -c) wins.
    app = cdk.App(context=defaults, outdir=outdir or os.environ.get("CDK_OUTDIR", "cdk.out"))
    stacks = build(app, SquallConfig.from_context(app.node.get_all_context()))
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stacks


def main() -> int:
    try:
        app, _ = create_app()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    assembly = app.synth()
    errors = [
        f"{stack.stack_name} {message.id}: {message.entry.data}"
        for stack in assembly.stacks
        for message in stack.messages
        if message.level == cdk.cx_api.SynthesisMessageLevel.ERROR
    ]
    for error in errors:
        print(error, file=sys.stderr)
    if errors:
        return 1
    print(f"synthesised {len(assembly.stacks)} stacks into {assembly.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
