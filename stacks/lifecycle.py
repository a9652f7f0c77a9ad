"""Squall's lifecycle hooks on a node group: one for launches, one for terminations.

Auto Scaling publishes every pending lifecycle action to EventBridge in the
group's region; the lifecycle function answers it (launch: CONTINUE once the
node is Ready with its GPUs allocatable; terminate: after the drain). The hooks
need no notification target of their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import aws_autoscaling as autoscaling
from constructs import Construct

from stacks import constants
from stacks.config import SquallConfig

# Auto Scaling's bounds on a hook's heartbeat timeout.
_MIN_HEARTBEAT_SECONDS = 30
_MAX_HEARTBEAT_SECONDS = 7200


@dataclass(frozen=True)
class HookSettings:
    launch_name: str
    terminate_name: str
    launch_timeout_seconds: int
    terminate_heartbeat_seconds: int

    @classmethod
    def from_config(cls, config: SquallConfig) -> HookSettings:
        policy = config.policy_settings
        # A launch Squall has not confirmed within the provision timeout is a
        # failed launch for the planner too (docs/design.md, "Planning rules").
        launch = int(policy.provision_timeout.total_seconds())
        # The drain function heartbeats at every step, so the timeout only has to
        # outlast a few steps; the drain deadline bounds the whole drain.
        terminate = max(
            constants.TERMINATE_HEARTBEAT_MIN_SECONDS,
            4 * int(policy.drain_step_delay.total_seconds()),
        )
        for name, seconds in (("provisionTimeout", launch), ("drainStepDelay x4", terminate)):
            if not _MIN_HEARTBEAT_SECONDS <= seconds <= _MAX_HEARTBEAT_SECONDS:
                raise ValueError(
                    f"policy.{name} gives a lifecycle hook timeout of {seconds} s; Auto "
                    f"Scaling accepts {_MIN_HEARTBEAT_SECONDS}-{_MAX_HEARTBEAT_SECONDS} s"
                )
        return cls(
            launch_name=config.launch_hook_name,
            terminate_name=config.terminate_hook_name,
            launch_timeout_seconds=launch,
            terminate_heartbeat_seconds=terminate,
        )

    @property
    def longest_timeout_seconds(self) -> int:
        """How long an action of Squall's hooks can wait at most: past it, Auto Scaling answers it."""
        return max(self.launch_timeout_seconds, self.terminate_heartbeat_seconds)

    def specifications(self) -> list[autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty]:
        """The hooks as part of a group Squall creates, so even its first launch is hooked."""
        return [
            autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                lifecycle_hook_name=hook.name,
                lifecycle_transition=hook.transition,
                heartbeat_timeout=hook.timeout_seconds,
                default_result=hook.default_result,
                notification_metadata=hook.metadata,
            )
            for hook in self.hooks()
        ]

    def hooks(self) -> tuple[_Hook, ...]:
        return (
            # Unanswered by the timeout means the node never became usable:
            # ABANDON terminates it instead of paying for a broken GPU node.
            _Hook(
                "Launch",
                self.launch_name,
                constants.LAUNCH_TRANSITION,
                self.launch_timeout_seconds,
                "ABANDON",
            ),
            # A terminating instance goes either way; CONTINUE just does not wait
            # any longer than it must.
            _Hook(
                "Terminate",
                self.terminate_name,
                constants.TERMINATE_TRANSITION,
                self.terminate_heartbeat_seconds,
                "CONTINUE",
            ),
        )


@dataclass(frozen=True)
class _Hook:
    construct_id: str
    name: str
    transition: str
    timeout_seconds: int
    default_result: str

    @property
    def metadata(self) -> str:
        """Handed to the lifecycle function with every event: when the hook will expire."""
        return json.dumps({"heartbeatTimeout": self.timeout_seconds})


class LifecycleHooks(Construct):
    """The hooks on groups that exist already (created by the platform team)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group_names: Sequence[str],
        settings: HookSettings,
    ) -> None:
        super().__init__(scope, construct_id)
        for group_name in group_names:
            for hook in settings.hooks():
                autoscaling.CfnLifecycleHook(
                    self,
                    f"{hook.construct_id}-{group_name}",
                    auto_scaling_group_name=group_name,
                    lifecycle_hook_name=hook.name,
                    lifecycle_transition=hook.transition,
                    heartbeat_timeout=hook.timeout_seconds,
                    default_result=hook.default_result,
                    notification_metadata=hook.metadata,
                )
