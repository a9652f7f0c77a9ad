"""Cold start: from a fresh function process to its first AWS call, against a warm call.

The Lambda asset is built into a temporary directory as stacks/packaging.py builds it
(PipBundling: pip with --platform/--python-version/--only-binary, the package and
each function's settings on top, bytecode compiled by a CPython of the runtime's
version), except for one thing: pip installs the wheels of this machine's platform,
because the runtime's aarch64 wheels (pydantic-core's, PyYAML's) cannot load here.
boto3, which the Lambda runtime provides, is installed beside it with its bytecode,
as the runtime ships it.

Each handler then runs in a fresh interpreter of the runtime's Python version, as in
Lambda: the asset on sys.path, no bytecode written (/var/task is read-only), the
settings file and variables the stack sets, fake credentials, tracing off (no X-Ray
daemon here). An audit hook takes the time of the first network call (a DNS lookup
or a connect) and refuses it, so nothing leaves the machine:

  import   importing the handler module (Lambda's init phase)
  first    the first invocation, up to its first AWS call (clients, settings, the
           Kubernetes client are made on the first call)
  warm     the second invocation of the same process, up to its first AWS call

cold = import + first. The baseline, measured in the same run, is the same asset
without its bytecode, as packaging.py built it before. Goal: cold under 1 s with
bytecode. With SnapStart the import phase runs once, when a version is published.

    python benchmarks/bench_cold_start.py [runs] [--keep DIR]

--keep builds into DIR, or reuses the dependencies built there before (pip takes
minutes here) with this checkout's package copied and compiled again.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stacks import constants  # noqa: E402
from stacks.config import SquallConfig, load_cdk_json_context  # noqa: E402
from stacks.functions import function_settings, settings_file  # noqa: E402
from stacks.packaging import (  # noqa: E402
    PipBundling,
    bytecode_python,
    compile_command,
    pip_command,
    runtime_requirements,
    staged_source,
)

EVENTS = REPO / "tests" / "events"
HANDLER_EVENTS = {
    constants.SUBMIT: "sqs_jobs_batch.json",
    constants.SCALE: "schedule_reconcile.json",
    constants.LIFECYCLE: "lifecycle_launch.json",
    constants.DRAIN: "drain_step.json",
    constants.RECONCILE: "schedule_reconcile.json",
}
GOAL_SECONDS = 1.0
LOCAL_PLATFORM = f"manylinux2014_{os.uname().machine}"

# Runs in the fresh interpreter: argv = handler module, event file.
DRIVER = r"""
import importlib, json, sys, time

started = time.perf_counter()
first_call = []


def refuse_network(event, args):
    if event in ("socket.getaddrinfo", "socket.connect") and not first_call:
        first_call.append(time.perf_counter())
        raise ConnectionRefusedError("bench_cold_start: no network")


sys.addaudithook(refuse_network)


class Context:
    function_name = "squall-bench"
    function_version = "1"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-west-2:123456789012:function:squall-bench:live"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = "/aws/lambda/squall-bench"
    log_stream_name = "bench"

    def get_remaining_time_in_millis(self):
        return 60_000


module = importlib.import_module(sys.argv[1])
imported = time.perf_counter()
event = json.loads(open(sys.argv[2]).read())


def invoke():
    first_call.clear()
    start = time.perf_counter()
    try:
        module.handler(event, Context())
    except Exception:
        pass  # the refused call fails the invocation; only the time to it counts
    if not first_call:
        raise SystemExit("the handler made no network call")
    return first_call[0] - start


first = invoke()
warm = invoke()
print("BENCH " + json.dumps({"import": imported - started, "first": first, "warm": warm}))
"""


def local_pip(command: Sequence[str]) -> None:
    """packaging's pip command for this machine's platform (the Lambda's wheels cannot load here)."""
    command = list(command)
    command[command.index("--platform") + 1] = LOCAL_PLATFORM
    subprocess.run(command, check=True, capture_output=True, text=True)


def runtime_provided(target: Path, python: str) -> None:
    """boto3 and botocore, which the Lambda runtime provides, with their bytecode."""
    local_pip(pip_command(target=str(target), requirements=["boto3"]))
    subprocess.run(compile_command(python=python, target=str(target)), check=True, capture_output=True)


def cluster_certificate() -> str:
    """A real PEM certificate (the functions load the configured one at cold start)."""
    import certifi

    pem = Path(certifi.where()).read_text()
    end = "-----END CERTIFICATE-----"
    return base64.b64encode((pem.split(end)[0] + end + "\n").encode()).decode()


def configured() -> tuple[SquallConfig, dict[str, dict[str, Any]]]:
    """cdk.json's configuration, with the clusters' certificates set (no DescribeCluster first)."""
    context = load_cdk_json_context()
    context["clusters"] = [
        {**cluster, "certificateAuthority": cluster_certificate()} for cluster in context["clusters"]
    ]
    config = SquallConfig.from_context(context)
    return config, {handler: function_settings(config, handler) for handler in constants.FUNCTIONS}


def build(workdir: Path, python: str) -> tuple[Path, Path, SquallConfig]:
    config, settings = configured()
    source = staged_source(directory=workdir / "source", settings=settings)
    asset = workdir / "asset"
    asset.mkdir()
    PipBundling(
        source=source, requirements=runtime_requirements(), run=local_pip, python=lambda: python
    ).try_bundle(str(asset), None)
    runtime = workdir / "runtime"
    runtime_provided(runtime, python)
    return asset, runtime, config


def run_handler(
    python: str, asset: Path, runtime: Path, handler: str, environment: dict[str, str]
) -> dict[str, float]:
    spec = constants.FUNCTIONS[handler]
    module = spec.handler.rsplit(".", 1)[0]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{asset}{os.pathsep}{runtime}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LAMBDA_TASK_ROOT": str(asset),
        "AWS_REGION": "us-west-2",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "AKIDBENCHMARK",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        "AWS_SESSION_TOKEN": "benchmark",
        "AWS_MAX_ATTEMPTS": "1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        **environment,
    }
    result = subprocess.run(
        [python, "-c", DRIVER, module, str(EVENTS / HANDLER_EVENTS[handler])],
        cwd=asset,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{handler}: the driver failed:\n{result.stderr[-3000:]}")
    times: dict[str, float] = json.loads(lines[-1].removeprefix("BENCH "))
    return times


def environment_of(config: SquallConfig, handler: str) -> dict[str, str]:
    """What the stack sets (stacks/functions.py function_environment), with the deploy-time names filled in."""
    environment = {
        "SQUALL_SETTINGS_FILE": settings_file(handler),
        "SQUALL_TABLE_NAME": constants.table_name(config.prefix),
        "POWERTOOLS_SERVICE_NAME": "squall",
        "POWERTOOLS_METRICS_NAMESPACE": "Squall",
        "POWERTOOLS_LOG_LEVEL": config.log_level,
    }
    if handler in (constants.LIFECYCLE, constants.DRAIN):
        queue = constants.drain_queue_name(config.prefix)
        environment["SQUALL_DRAIN_QUEUE_URL"] = f"https://sqs.us-west-2.amazonaws.com/123456789012/{queue}"
    return environment


def median_of(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}


def measure(workdir: Path, python: str, runs: int, *, reuse: bool) -> None:
    if reuse and (workdir / "asset").is_dir():
        print(f"reusing the dependencies built in {workdir}; the package is copied and compiled again")
        asset, runtime, config = refresh(workdir, python)
    else:
        print(
            f"building the asset (pip for {LOCAL_PLATFORM}, Python {constants.PYTHON_VERSION}: {python}) ..."
        )
        asset, runtime, config = build(workdir, python)
    bare = workdir / "asset-without-bytecode"
    if bare.exists():
        shutil.rmtree(bare)
    shutil.copytree(asset, bare, ignore=shutil.ignore_patterns("__pycache__"))
    size = sum(p.stat().st_size for p in asset.rglob("*") if p.is_file()) / 1e6
    bare_size = sum(p.stat().st_size for p in bare.rglob("*") if p.is_file()) / 1e6
    print(f"asset: {size:.1f} MB unzipped with bytecode, {bare_size:.1f} MB without")
    print(f"median of {runs} fresh processes per handler, seconds (cold = import + first):")
    print(
        f"  {'handler':<10} {'variant':<12} {'import':>7} {'first':>7} {'cold':>7} {'warm':>7} {'cold/warm':>10}"
    )
    colds: dict[str, dict[str, float]] = {"bytecode": {}, "no bytecode": {}}
    for handler in constants.FUNCTIONS:
        environment = environment_of(config, handler)
        for variant, tree in (("bytecode", asset), ("no bytecode", bare)):
            times = median_of([run_handler(python, tree, runtime, handler, environment) for _ in range(runs)])
            cold = times["import"] + times["first"]
            colds[variant][handler] = cold
            print(
                f"  {handler:<10} {variant:<12} {times['import']:7.3f} {times['first']:7.3f} {cold:7.3f} "
                f"{times['warm']:7.3f} {cold / times['warm']:10.0f}"
            )
    for handler in constants.FUNCTIONS:
        ratio = colds["bytecode"][handler] / colds["no bytecode"][handler]
        print(f"  ratio cold with/without bytecode, {handler}: {ratio:.3f}")
    worst = max(colds["bytecode"].values())
    verdict = "met" if worst < GOAL_SECONDS else "NOT met"
    print(
        f"  slowest cold start with bytecode: {worst:.3f} s (goal: under {GOAL_SECONDS:.0f} s -> {verdict})"
    )


def refresh(workdir: Path, python: str) -> tuple[Path, Path, SquallConfig]:
    """The kept asset with this checkout's package and settings (the dependencies stay)."""
    asset = workdir / "asset"
    config, settings = configured()
    source = staged_source(directory=workdir / "source", settings=settings)
    for name in ("squall", constants.SETTINGS_DIR):
        shutil.rmtree(asset / name, ignore_errors=True)
        shutil.copytree(source / name, asset / name)
        subprocess.run(
            compile_command(python=python, target=str(asset / name)), check=True, capture_output=True
        )
    return asset, workdir / "runtime", config


def main(argv: list[str]) -> None:
    runs = int(argv[0]) if argv and argv[0].isdigit() else 3
    python = bytecode_python()
    if "--keep" in argv:  # build into (or reuse) this directory: pip takes minutes
        workdir = Path(argv[argv.index("--keep") + 1])
        workdir.mkdir(parents=True, exist_ok=True)
        measure(workdir, python, runs, reuse=True)
        return
    with tempfile.TemporaryDirectory(prefix="squall-cold-start-") as tmp:
        measure(Path(tmp), python, runs, reuse=False)


if __name__ == "__main__":
    main(sys.argv[1:])
