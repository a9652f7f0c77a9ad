#!/usr/bin/env python3
"""The Squall CDK app: every stack, built from the settings in cdk.json.

    cdk deploy --all                     bundles the Lambda asset (pip, no Docker)
    python app.py                        offline check: synthesises every stack into
                                         cdk.out without bundling, runs cdk-nag,
                                         measures each template against
                                         CloudFormation's quotas, exits non-zero
                                         on any error

Run directly, the app reads cdk.json's context itself (the CDK CLI passes it
when it runs the app) and skips bundling: the CLI always says which stacks to
bundle (context aws:cdk:bundling-stacks), and what it says wins.
"""

from __future__ import annotations

import os
import sys

import aws_cdk as cdk
from aws_cdk import cx_api
from cdk_nag import AwsSolutionsChecks

from stacks.config import ConfigError, SquallConfig, load_cdk_json_context
from stacks.deployment import SquallStacks, build
from stacks.limits import TemplateLimitError, check_assembly, scaling_settings

BUNDLING_STACKS = "aws:cdk:bundling-stacks"


class SquallApp(cdk.App):
    """A CDK app whose every synthesis measures the templates it wrote against
    CloudFormation's per-stack quotas (stacks/limits.py).

    Every synthesis comes through this method: main's, ``cdk synth``'s (it runs main)
    and the tests', including the one ``Template.from_stack`` starts. One over a quota
    raises TemplateLimitError; ``near_limits`` keeps the last one's warnings.
    """

    def __init__(self, *, context: dict[str, object], outdir: str) -> None:
        super().__init__(context=context, outdir=outdir)
        self.scaling: dict[str, str] = {}
        self.near_limits: list[str] = []

    # The parameters are spelled out, not **kwargs: jsii passes a synthesis that
    # TypeScript starts with options (Annotations.from_stack) as keywords only then.
    def synth(
        self,
        *,
        aspect_stabilization: bool | None = None,
        error_on_duplicate_synth: bool | None = None,
        force: bool | None = None,
        skip_validation: bool | None = None,
        validate_on_synthesis: bool | None = None,
    ) -> cx_api.CloudAssembly:
        assembly = super().synth(
            aspect_stabilization=aspect_stabilization,
            error_on_duplicate_synth=error_on_duplicate_synth,
            force=force,
            skip_validation=skip_validation,
            validate_on_synthesis=validate_on_synthesis,
        )
        self.near_limits = check_assembly(assembly, scaling=self.scaling)
        return assembly


def create_app(
    *, context: dict[str, object] | None = None, outdir: str | None = None
) -> tuple[SquallApp, SquallStacks]:
    """The app with cdk-nag's AwsSolutions checks; `context` overrides cdk.json."""
    # No bundling unless asked: pip needs the network, and a synthesis check does
    # not need the dependencies.
    defaults = {BUNDLING_STACKS: [], **load_cdk_json_context(), **(context or {})}
    # Constructor context is the lowest layer: the CLI's (cdk.json, -c) wins.
    app = SquallApp(context=defaults, outdir=outdir or os.environ.get("CDK_OUTDIR", "cdk.out"))
    config = SquallConfig.from_context(app.node.get_all_context())
    stacks = build(app, config)
    app.scaling = scaling_settings(config, stacks)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stacks


def main() -> int:
    try:
        app, _ = create_app()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        assembly = app.synth()
    except TemplateLimitError as exc:
        # One write: jsii copies node's own stderr lines from another thread.
        sys.stderr.write(f"{exc}\n")
        return 2
    for warning in app.near_limits:
        sys.stderr.write(f"warning: {warning}\n")
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
