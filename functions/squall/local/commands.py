"""`squall local run|up|down|status` and `squall simulate`: the local runtime from the command line.

`local run` and `simulate`: scenarios and trace replays. `local up` starts the
embedded default as a long-running process (local/server.py; with `--groups FILE`,
a groups file's node groups, one simulated cluster per entry of its `clusters`, the
file checked here first) and prints the environment that points the CLI at it (with
the session's credentials: the local endpoint accepts no others); `local env` prints
it again, for another shell; `local down` stops it, and its state goes with it;
`local status` shows it, cluster by cluster.

Exit codes as the rest of `squall`: 0 when the run reached its end with every
invariant holding, 1 when it did not, 2 for a scenario, trace or groups file that
cannot be run (every problem listed with its field, or line and column) and for a
--jobs-out or --dashboard path that cannot be written.
Heavy imports wait until a command runs, so `squall validate` stays quick.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from squall.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from squall.cli.text import printable


def add_local_commands(subparsers: Any) -> None:
    """Add `local run` and `simulate` to the `squall` command's subparsers."""
    local = subparsers.add_parser("local", help="the local simulator: run scenarios")
    local_commands = local.add_subparsers(dest="local_command", required=True)
    run = local_commands.add_parser("run", help="run a scenario file (see docs/simulator.md)")
    run.add_argument("--scenario", required=True, metavar="FILE", help="scenario YAML")
    _common(run, backend="moto")
    run.set_defaults(run=cmd_local_run)

    up = local_commands.add_parser(
        "up", help="start the embedded default in the background; prints the environment to eval"
    )
    up.add_argument(
        "--port", type=int, default=None, help="the local AWS endpoint's loopback port (default 4580)"
    )
    up.add_argument(
        "--speed", default="1", help="cluster seconds per wall-clock second (default 1: real time)"
    )
    _state_dir_option(up)
    up.add_argument(
        "--real-image",
        action="append",
        default=[],
        metavar="IMAGE",
        help="run pods of this image as local processes (repeatable; a repository without a tag matches "
        "every tag); default: the examples' worker image",
    )
    up.add_argument("--no-real-pods", action="store_true", help="simulate every pod's run time")
    up.add_argument(
        "--groups",
        metavar="GROUPS.yaml",
        help="serve these node groups, as `squall simulate --groups` reads them: one simulated cluster per "
        "entry of its clusters (none: one), its policy, teams and regions' capacity (nodes still boot in "
        "seconds); default: the demo's groups in one cluster",
    )
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it to be ready")
    up.set_defaults(run=cmd_local_up)

    env = local_commands.add_parser(
        "env", help="print the environment of the running `squall local up` again (for another shell)"
    )
    _state_dir_option(env)
    env.set_defaults(run=cmd_local_env)

    down = local_commands.add_parser(
        "down", help="stop what `squall local up` started; its jobs, queues and logs are discarded"
    )
    _state_dir_option(down)
    down.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait after SIGTERM before SIGKILL"
    )
    down.set_defaults(run=cmd_local_down)

    status = local_commands.add_parser("status", help="whether `squall local up` runs, and what it holds")
    _state_dir_option(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=cmd_local_status)

    simulate = subparsers.add_parser(
        "simulate", help="replay a job trace against node groups, as fast as possible"
    )
    simulate.add_argument(
        "--trace",
        required=True,
        metavar="TRACE.csv",
        help="submit_s,team,gpus,replicas,run_s (optional priority,cpu,memory,max_runtime_s)",
    )
    simulate.add_argument(
        "--groups",
        metavar="GROUPS.yaml",
        help="nodeGroups (and optionally policy, regions, teams with gpuQuota and weight); default ./cdk.json",
    )
    _common(simulate, backend="memory")
    simulate.set_defaults(run=cmd_simulate)


def add_backend_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """`--backend`: where the local runtime keeps its AWS state (`squall demo` takes it too)."""
    parser.add_argument(
        "--backend",
        choices=["moto", "memory"],
        default=default,
        help=f"AWS state on moto's server or in memory (much faster, no endpoint); default {default}",
    )


def _common(parser: argparse.ArgumentParser, *, backend: str) -> None:
    parser.add_argument("--json", action="store_true", help="print only the summary object")
    add_backend_option(parser, default=backend)
    parser.add_argument(
        "--speed",
        help="virtual seconds per wall-clock second, or 'max' (default: the scenario's on a terminal, else max)",
    )
    parser.add_argument("--dashboard", metavar="DIR", help="also render the dashboard (PNG, HTML) into DIR")
    parser.add_argument(
        "--jobs-out",
        metavar="FILE.csv",
        help="also write one row per job (id,team,priority,gpus,replicas,submitted_s,started_s,finished_s,"
        "state,reason,cluster,starts_by_s,likely_start_s,cost) to FILE.csv",
    )


def cmd_local_run(args: argparse.Namespace) -> int:
    from squall.local.scenario import ScenarioError, load_scenario

    try:
        plan = load_scenario(args.scenario)
    except ScenarioError as exc:
        return _bad_input(exc)
    return _run(plan, args, follow_jobs=len(plan.submissions) <= 200)


def cmd_simulate(args: argparse.Namespace) -> int:
    from squall.local.scenario import ScenarioError
    from squall.local.trace import load_configuration, read_trace, trace_plan

    try:
        configuration = load_configuration(args.groups)
        rows = read_trace(args.trace, max_run=configuration.policy.max_runtime_limit)
        plan = trace_plan(rows, configuration, name=Path(args.trace).stem)
    except ScenarioError as exc:
        return _bad_input(exc)
    return _run(plan, args, follow_jobs=False)


def _run(plan: Any, args: argparse.Namespace, *, follow_jobs: bool) -> int:
    from dataclasses import replace

    from squall.local.live import RichLiveView, make_view
    from squall.local.render import write_dashboard
    from squall.local.scenario import Simulation
    from squall.local.summary import JobsOutError, check_jobs_out, write_jobs_csv

    if args.jobs_out:
        try:  # before the run too: an hours-long replay must not end unable to report
            check_jobs_out(args.jobs_out)
        except JobsOutError as exc:
            print(f"squall: --jobs-out {args.jobs_out}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.dashboard:
        try:  # before the run, not after it: a folder that cannot be written is bad input
            Path(args.dashboard).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(
                f"squall: --dashboard {args.dashboard}: cannot write there: {exc.strerror}", file=sys.stderr
            )
            return EXIT_USAGE
    speed = args.speed
    if speed is not None:
        if speed != "max":
            factor = _positive_speed(speed)
            if factor is None:
                print(
                    f"squall: --speed must be a positive number or 'max', got {speed[:40]!r}", file=sys.stderr
                )
                return EXIT_USAGE
            plan = replace(plan, speed=factor)
        else:
            plan = replace(plan, speed=None)
    view = (
        None
        if args.json
        else make_view(
            sys.stdout, title=plan.name, follow_jobs=follow_jobs, status_every=timedelta(minutes=30)
        )
    )
    # Pace only what someone watches: a pipe or --json gets the result as fast as possible.
    pace = isinstance(view, RichLiveView) or (speed is not None and speed != "max")
    written: list[str] = []

    def after(local: Any, _result: Any) -> None:
        if args.dashboard:
            files = write_dashboard(
                Path(args.dashboard),
                groups=plan.groups,
                points=local.metrics.points,
                start=plan.start,
                end=local.clock.now(),
                endpoint=local.backend.resources.endpoint if local.backend.resources is not None else None,
                teams=local.services.settings.team_shares(),
            )
            written.extend(str(p) for p in (files.png, files.html))

    result = Simulation(plan, backend=args.backend, view=view, pace=pace).run(after=after)
    jobs_out_failed = False
    if args.jobs_out:
        try:
            write_jobs_csv(args.jobs_out, result.jobs)
        except JobsOutError as exc:
            print(f"squall: --jobs-out {args.jobs_out}: {exc}", file=sys.stderr)
            jobs_out_failed = True
    if args.json:
        print(json.dumps(result.summary))
    else:
        print()
        for note in result.notes:
            print(f"  {note}")
        print(json.dumps(result.summary, indent=2))
        for line in summary_lines(result.summary):
            print(line)
        if written:
            print(f"dashboard: {', '.join(written)}")
        if args.jobs_out and not jobs_out_failed:
            print(f"jobs: {args.jobs_out} ({len(result.jobs)} rows)")
        verdict = "hold" if result.checks.hold else "BROKEN: " + json.dumps(result.checks.as_dict())
        print(f"{'finished' if result.finished else 'did not finish'}; invariants {verdict}")
    if jobs_out_failed:
        return EXIT_USAGE
    return EXIT_OK if result.ok else EXIT_FAILED


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's waits, estimates and costs in words, under its JSON."""
    lines = []
    waits = summary.get("queueWaitSeconds") or {}
    if waits:
        lines.append(
            "queue wait: "
            + ", ".join(f"{key} {waits[key]:,.0f} s" for key in ("p50", "p90", "p99", "max") if key in waits)
        )
    estimates = summary.get("estimates") or {}
    if estimates.get("judged"):
        median = estimates.get("likelyStartMedianError")
        lines.append(
            f"estimates: {estimates['startedByStartsBy']:.1%} of {estimates['judged']:,} judged jobs started by "
            "their first startsBy; likelyStart median error "
            + ("unknown" if median is None else f"{median:,.0f} s")
        )
    elif "estimates" in summary:
        lines.append("estimates: no job judged (none waited with an estimate and started)")
    costs = summary.get("costs")
    if costs:
        teams = ", ".join(f"{team} ${dollars:,.2f}" for team, dollars in costs["byTeam"].items())
        lines.append(
            f"costs: jobs ${costs['jobs']:,.2f} + overhead ${costs['overhead']:,.2f} = fleet ${costs['fleet']:,.2f}"
            + (f" ({teams})" if teams else "")
        )
    return lines


def _state_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where its pid, port and environment (with the session's credentials) are kept, made "
        "private (0700) (default $SQUALL_STATE_DIR, else $XDG_STATE_HOME/squall, else ~/.local/state/squall)",
    )


def cmd_local_up(args: argparse.Namespace) -> int:
    from squall.local import control

    speed = _positive_speed(args.speed)
    if speed is None:
        print(f"squall: --speed must be a positive number, got {args.speed[:40]!r}", file=sys.stderr)
        return EXIT_USAGE
    port = control.DEFAULT_PORT if args.port is None else args.port
    if not 1 <= port <= 65535:
        print(f"squall: --port must be 1..65535, got {port}", file=sys.stderr)
        return EXIT_USAGE
    groups = None
    if args.groups is not None:
        from squall.local.scenario import ScenarioError
        from squall.local.trace import load_configuration

        groups = Path(args.groups).absolute()  # the server reads it, from its own directory
        try:  # here, before anything starts: a file that cannot be served starts nothing
            load_configuration(groups)
        except ScenarioError as exc:
            return _bad_input(exc)
    try:
        state = control.up(
            state_dir=control.state_dir(args.state_dir),
            port=port,
            speed=speed,
            real_pods=not args.no_real_pods,
            images=args.real_image,
            timeout=args.timeout,
            groups=groups,
        )
    except control.ControlError as exc:
        print(f"squall: {printable(str(exc))}", file=sys.stderr)
        return exc.code
    print(control.exports(state["env"]))
    clusters = ", ".join(
        f"{c.get('name')} ({c.get('region')})" for c in state.get("clusters") or () if isinstance(c, dict)
    )
    print(
        f"# squall local: up on {state['endpoint']} (pid {state['pid']}), clusters {clusters}; "
        f"state in {state['stateDir']}; "
        f"another shell: `{control.ENV_COMMAND}`; stop it with `squall local down`",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_local_env(args: argparse.Namespace) -> int:
    from squall.local import control

    try:
        env = control.environment(state_dir=control.state_dir(args.state_dir))
    except control.ControlError as exc:
        print(f"squall: {printable(str(exc))}", file=sys.stderr)
        return exc.code
    print(control.exports(env))
    return EXIT_OK


def cmd_local_down(args: argparse.Namespace) -> int:
    from squall.local import control

    try:
        said = control.down(state_dir=control.state_dir(args.state_dir), timeout=args.timeout)
    except control.ControlError as exc:
        print(f"squall: {printable(str(exc))}", file=sys.stderr)
        return exc.code
    print(said, file=sys.stderr)
    return EXIT_OK


def cmd_local_status(args: argparse.Namespace) -> int:
    from squall.local import control

    shown = control.status(state_dir=control.state_dir(args.state_dir))
    if args.json:
        print(json.dumps(shown))
    else:
        print(control.describe(shown))
    return EXIT_OK if shown["running"] else EXIT_FAILED


def _positive_speed(text: str) -> float | None:
    """A --speed factor: a positive, finite number; None when the text is not one."""
    try:
        factor = float(text)
    except ValueError:
        return None
    return factor if math.isfinite(factor) and factor > 0 else None


def _bad_input(exc: Any) -> int:
    count = len(exc.errors)
    print(f"squall: {exc.source or 'input'}: {count} error{'s' if count != 1 else ''}", file=sys.stderr)
    for error in exc.errors:
        print(f"  {error}", file=sys.stderr)
    return EXIT_USAGE
