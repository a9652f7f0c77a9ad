"""`squall console`: the web console on a loopback port, over the deployment the environment names."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from squall.cli.argtypes import whole_number
from squall.cli.errors import EXIT_FAILED, EXIT_OK, CommandError

DEFAULT_PORT = 8080


def cmd_console(args: argparse.Namespace) -> int:
    from squall.cli import deployment
    from squall.cli.client import Client

    try:
        from squall.console.context import ConsoleContext
    except ModuleNotFoundError as exc:  # flask: the console's extra
        raise CommandError(
            f"the console needs {exc.name}: pip install 'squall[console]'", code=EXIT_FAILED
        ) from exc
    from squall.console.guard import new_token
    from squall.console.server import ConsoleServer

    client = Client.local(args.state_dir) if args.local else Client()
    deployment.table_name()  # refused now, with the hint, rather than on every page
    context = ConsoleContext(client=client, token=new_token(), allow_actions=args.allow_actions)
    try:
        server = ConsoleServer(context, port=args.port)
    except OSError as exc:
        raise CommandError(
            f"--port {args.port}: cannot listen on 127.0.0.1:{args.port} ({exc.strerror or exc}); "
            "choose another port, or 0 for a free one",
            code=EXIT_FAILED,
        ) from exc
    mode = "actions allowed (cancel, serve, unserve, each confirmed)" if args.allow_actions else "read-only"
    print(f"Squall console ({mode}) at {server.url}", flush=True)
    print(
        "Open that URL: it carries this session's token. Ctrl-C stops the console.",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return EXIT_OK


def add_console_command(sub: Any) -> None:
    p = sub.add_parser(
        "console",
        help="a local web console (127.0.0.1 only): the queue, jobs, sweeps, capacity, costs and model services",
    )
    p.add_argument(
        "--port",
        type=whole_number(0, 65_535),
        default=DEFAULT_PORT,
        help=f"the loopback port to listen on (default {DEFAULT_PORT}; 0: a free one)",
    )
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer cancel, serve and unserve (each behind a confirmation), sent as the CLI sends them",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="read the local runtime `squall local up` started, without eval-ing its environment",
    )
    p.add_argument("--state-dir", metavar="DIR", help="with --local: that runtime's state directory")
    p.set_defaults(run=cmd_console)
