"""Node groups as cdk.json writes them, for the tests that build scenarios and plans."""

from __future__ import annotations

from typing import Any

P3_2XLARGE = {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1, "pods": 58}
G5_12XLARGE = {"cpu": "47800m", "memory": "180Gi", "nvidia.com/gpu": 4, "pods": 58}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
INSTANCE_TYPES = {"p3.2xlarge": P3_2XLARGE, "g5.12xlarge": G5_12XLARGE}


def gpu_group(name: str, instance_type: str, *, region: str = "us-west-2", max_size: int, **extra: Any) -> dict[str, Any]:
    """A GPU group of one instance type, tainted for GPU pods; `extra` adds cdk.json keys (priority, ...)."""
    return {
        "name": name,
        "region": region,
        "asgName": f"squall-{name}",
        "instanceType": instance_type,
        "allocatable": dict(INSTANCE_TYPES[instance_type]),
        "taints": [dict(GPU_TAINT)],
        "maxSize": max_size,
        **extra,
    }
