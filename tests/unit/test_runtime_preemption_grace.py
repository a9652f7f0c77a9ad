"""The composition root gives admitted pods preemption's grace only when preemption is on."""

from __future__ import annotations

from datetime import timedelta

from squall.core.settings import Settings
from squall.runtime import _termination_grace


def test_preemption_grace_reaches_the_pods_only_when_preemption_is_on() -> None:
    off = Settings(table_name="t")
    assert _termination_grace(off) is None
    on = Settings(table_name="t", policy={"preemption": {"enabled": True, "graceSeconds": 300}})
    assert _termination_grace(on) == timedelta(seconds=300)
    # never less than Kubernetes' own 30 s
    short = Settings(table_name="t", policy={"preemption": {"enabled": True, "graceSeconds": 5}})
    assert _termination_grace(short) == timedelta(seconds=30)
