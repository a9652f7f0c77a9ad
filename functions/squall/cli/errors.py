"""How a `squall` command ends: its exit codes, its error, and the one place that reports it.

0 ok, 1 not found or failed, 2 bad input; a followed job's own end (`watch`, `submit
--watch`): 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 REJECTED; 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from squall.cli.text import printable
from squall.core.errors import SquallError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_CANCELLED, EXIT_REJECTED = 3, 4
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """What a command says on failing, and its exit code (bad input unless it says otherwise)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class NotFound(CommandError):
    """No job (or model service) of that name: exit 1."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message, code)


class WaitTimeout(CommandError):
    """What was waited for was not reached in time (`Client.wait`'s timeout): exit 1."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message, code)


def reported(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Errors as one `squall: ...` line on stderr and an exit code (the CLI's convention).

    A SquallError is the deployment's table, queue or bucket failing us, already
    translated by its adapter: exit 1 (and, when the local runtime it talked to has
    stopped, a line that says so and how to start one). Both can carry text from outside
    (a job's id or reason, a server's error text), so the line is printed escaped.
    """

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except CommandError as exc:
            print(f"squall: {printable(str(exc))}", file=sys.stderr)
            return exc.code
        except SquallError as exc:
            print(f"squall: {printable(str(exc))}", file=sys.stderr)
            from squall.cli.deployment import stopped_local_endpoint  # it raises CommandError

            if (stopped := stopped_local_endpoint()) is not None:  # the local runtime went away
                print(f"squall: {stopped}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            print("squall: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED

    return run
