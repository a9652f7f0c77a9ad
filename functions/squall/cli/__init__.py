"""The `squall` command: what a researcher or an operator runs on a laptop.

Nothing here runs in a Lambda function: the asset leaves this package out and an
import contract keeps the functions' layers from importing it.
"""

from squall.cli.commands import main

__all__ = ["main"]
