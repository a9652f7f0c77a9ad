"""Squall: bursty GPU training on Kubernetes in AWS.

`from squall import Client` is the Python SDK (squall/cli/client.py), loaded on first
use: the Lambda functions import this package, and their cold start must not pay for
the SDK (nor could they: the asset leaves squall/cli out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from squall.cli.client import Client, CodeUpload, ServeRequest, Submission
    from squall.cli.errors import CommandError, NotFound, WaitTimeout

_SDK = {
    "Client": "squall.cli.client",
    "CodeUpload": "squall.cli.client",
    "ServeRequest": "squall.cli.client",
    "Submission": "squall.cli.client",
    "CommandError": "squall.cli.errors",
    "NotFound": "squall.cli.errors",
    "WaitTimeout": "squall.cli.errors",
}

__all__ = ["Client", "CodeUpload", "CommandError", "NotFound", "ServeRequest", "Submission", "WaitTimeout"]


def __getattr__(name: str) -> Any:
    module = _SDK.get(name)
    if module is None:
        raise AttributeError(f"module 'squall' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
