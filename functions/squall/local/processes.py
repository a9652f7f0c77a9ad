"""Real pods: the simulated cluster's worker-image pods run as local processes.

`ProcessRunner` is the simulated cluster's `PodRunner` (local/cluster/pods.py) for
`squall local up`. A pod whose image is one of the worker images runs, on this
machine, the command Squall rendered for it (with a codeUri that is the worker
image's launcher, `python -m trainer.launch -- <command>`, which fetches, checks and
unpacks the code first), with:

- the worker image's own environment (`IMAGE_ENV`: what its Dockerfile's ENV
  sets, plus the launcher's `SQUALL_SKIP_REQUIREMENTS` when the runner's own
  environment sets it; `image_env` replaces it), under the environment Squall
  rendered in its pod spec (`env` values win, as a container's env wins over its
  image's; `valueFrom` has nothing to read here and is left out), plus the local
  endpoint's AWS settings and its session's credentials (the job's own identity on AWS),
  HOSTNAME the pod's name,
  and the worker image's `trainer` package on PYTHONPATH; `python`/`python3` at
  the head of the command is this interpreter (the one with the trainer's
  dependencies);
- TF_CONFIG's addresses (`<job>-<type>-<i>.<ns>.svc:2222`) mapped to loopback
  ports: one free port per replica address, the same for every pod of the job
  (kept while the job has pods, for at most `MAX_JOBS_WITH_PORTS` jobs);
- a working directory of its own under `work_dir` (also the launcher's
  SQUALL_CODE_DIR), removed once the process has exited;
- its stdout and stderr shipped to CloudWatch Logs as the cluster's log agent
  ships them (core/logstreams.py): the stream
  `<node>-application.var.log.containers.<pod>_<ns>_<container>-<id>.log` (a new
  64-hex container id per run), each line in the agent's JSON envelope
  (`{"log", "stream", "time", "kubernetes": {...}}`), lines longer than 16 KiB split
  as the container runtime splits them, in batches (PutLogEvents: at most 10,000
  events or about 1 MB), from a bounded buffer: when it is full the process waits
  on its pipe, as it would behind a slow log agent.

A model service's pod (the `squall.io/model-service` label, a `fetch-model` init
container and a `serving` container, as core/serving_manifests.py renders them) runs
as ONE process, a shell that runs its containers one after the other: first the init
container's own command (the worker image's `python -m trainer.fetch_model --source
… --target …`, the target in the pod's `models` volume moved under the pod's
directory), then, once that has exited 0, in the shell's place, the local stand-in
for TensorFlow Serving (squall/local/model_server.py): `python -m
squall.local.model_server --model-dir <what fetch-model copied> --model-name
<serving's --model_name> --model-version <the last part of fetch-model's --target>
--rest-port P --grpc-port Q`. A failed fetch's exit code is the pod's (2: no
SavedModel). The pod has two free loopback ports of its own per run, the same
environment rules (no worker image ENV but its quiet TensorFlow logs; this squall and
the worker image's `trainer` on PYTHONPATH), and its output is shipped as the
`serving` container's. `ready(pod)` says whether its
model status endpoint answers AVAILABLE (one HTTP GET of at most
`READY_TIMEOUT_SECONDS`), `ports(pod)` maps the pod's container ports (8501 REST,
8500 gRPC, or what its serving args say) to the loopback ports it listens on.

A replica's next pod starts only after the previous pod's process has exited (a
worker re-created after an eviction must not find its port still taken), and at
most `max_processes` run at once: the kubelet asks again on the next advance.

`stop` sends SIGTERM to the process group at once and SIGKILL when the pod's
`terminationGracePeriodSeconds` (default 30) has passed; `close` stops everything.
A process killed by a signal reports 128 + the signal, as container runtimes do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

from squall.conventions import JOB_ID_LABEL, MODEL_SERVICE_LABEL
from squall.core.logstreams import ContainerStream
from squall.core.serving_manifests import FETCH_CONTAINER, SERVING_CONTAINER
from squall.local.aws import REGION, endpoint_credentials
from squall.local.server import process_start
from squall.ports import KubeObject

logger = logging.getLogger("squall.local.processes")

# The worker image the examples run (examples/*.yaml): a reference without a tag or
# digest matches every tag of its repository.
WORKER_IMAGES = ("123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer",)
# The worker image's sources: its `trainer` package goes on the pods' PYTHONPATH.
TRAINER_PATH = Path(__file__).resolve().parents[3] / "worker_images" / "tf_trainer"
# The worker image's Dockerfile ENV: what its containers have before the pod's env.
IMAGE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "TF_CPP_MIN_LOG_LEVEL": "1",
}
# Knobs of the image's launcher (trainer/launch.py) a local operator may set for every
# real pod from the runner's environment: a job's spec cannot (SQUALL_* is reserved).
PASSED_THROUGH = ("SQUALL_SKIP_REQUIREMENTS",)
DEFAULT_GRACE_SECONDS = 30
MAX_GRACE_SECONDS = 600
MAX_PROCESSES = 32
MAX_JOBS_WITH_PORTS = 1_000
# The container runtime splits a line longer than this into several log records.
LINE_CHUNK = 16 * 1024
BUFFERED_LINES = 10_000  # per process: then its pipe fills and it waits
BATCH_EVENTS = 10_000  # PutLogEvents' limits
BATCH_BYTES = 1_000_000
EVENT_OVERHEAD = 26  # bytes PutLogEvents counts per event beyond its message
FLUSH_SECONDS = 0.5
READERS_JOIN_SECONDS = 5.0
# A model service's pod: its containers as the serving contract (core/serving_manifests.py) renders them.
REST_CONTAINER_PORT = 8501  # TensorFlow Serving's --rest_api_port and --port defaults in the contract
GRPC_CONTAINER_PORT = 8500
MODEL_SERVER_MODULE = "squall.local.model_server"
# The squall package's folder: on a model service pod's PYTHONPATH (it runs `-m squall.local.model_server`).
SQUALL_PATH = Path(__file__).resolve().parents[2]
# The stand-in's environment beyond the basics: TensorFlow's C++ logs as quiet as the worker image's.
SERVING_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}
READY_TIMEOUT_SECONDS = 0.5
READY_BODY_BYTES = 64 * 1024
# No proxy for loopback checks, whatever http_proxy says.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def image_matches(image: str, patterns: Iterable[str]) -> bool:
    """Whether `image` is one of `patterns`: exactly, or any tag/digest of a repository given bare."""
    repository = _repository(image)
    for pattern in patterns:
        if image == pattern:
            return True
        if _repository(pattern) == pattern and repository == pattern:
            return True
    return False


def _repository(image: str) -> str:
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def map_tf_config(text: str, ports: dict[str, int], allocate: Callable[[], int]) -> str:
    """TF_CONFIG with every cluster address replaced by 127.0.0.1 and the port `ports` gives it.

    An address not in `ports` yet gets `allocate()`; `ports` is shared by the job's pods.
    Text that is not a TF_CONFIG object is returned as it is.
    """
    try:
        config = json.loads(text)
    except ValueError:
        return text
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict):
        return text
    mapped: dict[str, Any] = {}
    for role, addresses in cluster.items():
        if not isinstance(addresses, list):
            mapped[role] = addresses
            continue
        role_addresses = []
        for address in addresses:
            if not isinstance(address, str):
                role_addresses.append(address)
                continue
            if address not in ports:
                ports[address] = allocate()
            role_addresses.append(f"127.0.0.1:{ports[address]}")
        mapped[role] = role_addresses
    config["cluster"] = mapped
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def default_image_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker image's ENV, and the launcher knobs `environ` sets (`PASSED_THROUGH`)."""
    return IMAGE_ENV | {key: environ[key] for key in PASSED_THROUGH if key in environ}


@dataclass(frozen=True)
class ServingPod:
    """What a model service's pod asks of the stand-in, read from its containers."""

    source: str
    model_name: str
    model_version: int
    rest_container_port: int
    grpc_container_port: int


def serving_pod(pod: KubeObject) -> ServingPod | None:
    """The model service a pod serves, or None when it is not a model service's pod as rendered."""
    labels = pod.get("metadata", {}).get("labels") or {}
    if not labels.get(MODEL_SERVICE_LABEL):
        return None
    spec = pod.get("spec") or {}
    fetch = _named(spec.get("initContainers"), FETCH_CONTAINER)
    serving = _named(spec.get("containers"), SERVING_CONTAINER)
    if fetch is None or serving is None:
        return None
    fetch_args = _flags(fetch.get("args"))
    serving_args = _flags(serving.get("args"))
    source = fetch_args.get("--source")
    target = fetch_args.get("--target")
    name = serving_args.get("--model_name")
    # The target is a path in the pod's `models` volume, placed under the pod's directory.
    if not source or not target or not name or ".." in PurePosixPath(target).parts:
        return None
    version = target.rstrip("/").rsplit("/", 1)[-1]
    if not version.isdigit() or not 1 <= int(version) <= 10**9:
        return None
    try:
        rest = int(serving_args.get("--rest_api_port", REST_CONTAINER_PORT))
        grpc = int(serving_args.get("--port", GRPC_CONTAINER_PORT))
    except ValueError:
        return None
    return ServingPod(
        source=source,
        model_name=name,
        model_version=int(version),
        rest_container_port=rest,
        grpc_container_port=grpc,
    )


def _named(containers: Any, name: str) -> Mapping[str, Any] | None:
    if not isinstance(containers, list):
        return None
    for container in containers:
        if isinstance(container, Mapping) and container.get("name") == name:
            return container
    return None


def _command(container: Mapping[str, Any], *, default: Sequence[str]) -> list[str]:
    """A container's command and its args, as the container runtime runs them."""
    command = [str(c) for c in container.get("command") or default]
    return command + [str(a) for a in container.get("args") or []]


def _flags(args: Any) -> dict[str, str]:
    """`--flag=value` and `--flag value` pairs of a container's args (the first of each wins)."""
    flags: dict[str, str] = {}
    items = [str(a) for a in args] if isinstance(args, list) else []
    for index, item in enumerate(items):
        if not item.startswith("--"):
            continue
        if "=" in item:
            key, value = item.split("=", 1)
        elif index + 1 < len(items) and not items[index + 1].startswith("--"):
            key, value = item, items[index + 1]
        else:
            continue
        flags.setdefault(key, value)
    return flags


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False)
class _Process:
    uid: str
    replica: tuple[str, str]  # (namespace, replica Job name)
    job: tuple[str, str]  # (namespace, Squall job id)
    popen: subprocess.Popen[bytes]
    stream: ContainerStream
    directory: Path
    grace: float
    lines: queue.Queue[tuple[int, str, str] | None]
    readers: list[threading.Thread] = field(default_factory=list)
    kill_at: float | None = None  # set once stopped: SIGKILL then
    exit_code: int | None = None
    shipped: int = 0
    dropped: int = 0
    flushing: threading.Lock = field(default_factory=threading.Lock)  # one batch at a time, in order
    serving: ServingPod | None = None  # a model service's pod: what it serves
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> loopback port
    start_time: str | None = None  # its start time as the system counts it (server.process_start)


class ProcessRunner:
    """Runs the worker image's pods as local processes; see the module docstring."""

    def __init__(
        self,
        *,
        endpoint: str,
        log_group: str,
        work_dir: Path,
        logs_client: Any,
        images: Sequence[str] = WORKER_IMAGES,
        trainer_path: Path | None = TRAINER_PATH,
        max_processes: int = MAX_PROCESSES,
        python: str = sys.executable,
        region: str = REGION,
        image_env: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
    ) -> None:
        if max_processes < 1:
            raise ValueError("max_processes must be at least 1")
        self.images = tuple(images)
        self.endpoint = endpoint
        self.log_group = log_group
        self.work_dir = Path(work_dir)
        self.trainer_path = trainer_path
        self.max_processes = max_processes
        self.python = python
        self.region = region
        self.image_env = dict(image_env) if image_env is not None else default_image_env(os.environ)
        if credentials is None:  # the endpoint's own, when it runs in this process
            known = endpoint_credentials(endpoint)
            credentials = known.environment() if known is not None else {}
        self.credentials = dict(credentials)
        self._logs = logs_client
        self._lock = threading.Lock()
        self._running: dict[str, _Process] = {}  # by pod uid
        self._stopping: list[_Process] = []
        self._by_replica: dict[tuple[str, str], _Process] = {}
        self._ports: OrderedDict[tuple[str, str], dict[str, int]] = OrderedDict()
        self.started = 0
        self.failed_starts = 0
        self._closed = threading.Event()
        self._shipper = threading.Thread(target=self._ship_loop, name="squall-pod-logs", daemon=True)
        self._shipper.start()

    # ---- PodRunner ----

    def runs(self, pod: KubeObject) -> bool:
        if serving_pod(pod) is not None:
            return True
        containers = pod.get("spec", {}).get("containers") or []
        return bool(containers) and image_matches(str(containers[0].get("image", "")), self.images)

    def start(self, pod: KubeObject) -> bool:
        metadata = pod["metadata"]
        uid = str(metadata["uid"])
        namespace = str(metadata["namespace"])
        labels = metadata.get("labels") or {}
        serving = serving_pod(pod)
        if serving is not None:
            # Each pod of a Deployment is its own replica, with ports of its own.
            replica = (namespace, str(metadata["name"]))
            job = (namespace, f"{MODEL_SERVICE_LABEL}={labels[MODEL_SERVICE_LABEL]}")
        else:
            replica = (namespace, str(labels.get("batch.kubernetes.io/job-name") or metadata["name"]))
            job = (namespace, str(labels.get(JOB_ID_LABEL) or replica[1]))
        with self._lock:
            if uid in self._running:
                return True
            previous = self._by_replica.get(replica)
            if previous is not None and previous.exit_code is None:
                return False  # the replica's last process still holds its port
            if len(self._running) + len(self._stopping) >= self.max_processes:
                return False
            ports = self._job_ports(job) if serving is None else {}
        if serving is not None:
            container = _named(pod["spec"]["containers"], SERVING_CONTAINER) or {}
        else:
            container = pod["spec"]["containers"][0]
        node = str(pod["spec"].get("nodeName") or "localhost")
        stream = ContainerStream(
            host=node,
            pod=str(metadata["name"]),
            namespace=namespace,
            container=str(container.get("name") or "main"),
            container_id=secrets.token_hex(32),
        )
        directory = self.work_dir / namespace / f"{metadata['name']}-{stream.container_id[:12]}"
        directory.mkdir(parents=True, exist_ok=True)
        listening: dict[int, int] = {}
        if serving is not None:
            listening = {serving.rest_container_port: free_port(), serving.grpc_container_port: free_port()}
            while listening[serving.grpc_container_port] == listening[serving.rest_container_port]:
                listening[serving.grpc_container_port] = free_port()
            argv = self._serving_argv(
                _named(pod["spec"].get("initContainers"), FETCH_CONTAINER) or {},
                serving,
                rest_port=listening[serving.rest_container_port],
                grpc_port=listening[serving.grpc_container_port],
                directory=directory,
            )
            env = self._serving_environment(container, pod_name=str(metadata["name"]))
        else:
            argv = self._argv(container)
            env = self._environment(
                container, pod_name=str(metadata["name"]), directory=directory, ports=ports
            )
        self._create_stream(stream)
        try:
            popen = _spawn(argv, directory=directory, env=env)
        except OSError as exc:
            # As a container whose command does not exist: it exits 127 and says why.
            self.failed_starts += 1
            why = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            popen = _spawn(
                [self.python, "-c", "import sys; print(sys.argv[1], file=sys.stderr); sys.exit(127)", why],
                directory=directory,
                env=env,
            )
        grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
            grace = DEFAULT_GRACE_SECONDS
        process = _Process(
            uid=uid,
            replica=replica,
            job=job,
            popen=popen,
            stream=stream,
            directory=directory,
            grace=float(min(grace, MAX_GRACE_SECONDS)),
            lines=queue.Queue(maxsize=BUFFERED_LINES),
            serving=serving,
            ports=listening,
            start_time=process_start(popen.pid),  # not reaped yet: the pid is still this process's
        )
        for name, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            assert pipe is not None
            reader = threading.Thread(
                target=_read_lines,
                args=(pipe, name, process.lines),
                name=f"pod-{name}-{popen.pid}",
                daemon=True,
            )
            reader.start()
            process.readers.append(reader)
        with self._lock:
            self._running[uid] = process
            self._by_replica[replica] = process
            self.started += 1
        logger.info("real pod started", extra={"pod": stream.pod, "namespace": namespace, "pid": popen.pid})
        return True

    def poll(self, pod: KubeObject) -> int | None:
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            process = self._running.get(uid)
        if process is None:
            return None
        code = process.popen.poll()
        if code is None:
            return None
        self._drain(process)
        with self._lock:
            self._running.pop(uid, None)
            process.exit_code = _exit_code(code)
        shutil.rmtree(process.directory, ignore_errors=True)
        return process.exit_code

    def stop(self, pod: KubeObject) -> None:
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            process = self._running.pop(uid, None)
            if process is None:
                return
            process.kill_at = time.monotonic() + process.grace
            self._stopping.append(process)
        _signal(process, signal.SIGTERM)

    def ready(self, pod: KubeObject) -> bool:
        """A model service's pod: its stand-in's model status answers AVAILABLE (one short GET).

        Other pods have no readiness of their own here: True while their process runs."""
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            process = self._running.get(uid)
        if process is None or process.popen.poll() is not None:
            return False
        serving = process.serving
        if serving is None:
            return True
        port = process.ports[serving.rest_container_port]
        url = f"http://127.0.0.1:{port}/v1/models/{serving.model_name}/versions/{serving.model_version}"
        try:
            with _LOOPBACK.open(url, timeout=READY_TIMEOUT_SECONDS) as response:
                body = json.loads(response.read(READY_BODY_BYTES))
        except (OSError, ValueError):  # not listening yet, loading (404), or not JSON
            return False
        statuses = body.get("model_version_status") if isinstance(body, dict) else None
        return isinstance(statuses, list) and any(
            isinstance(s, dict) and s.get("state") == "AVAILABLE" for s in statuses
        )

    def ports(self, pod: KubeObject) -> Mapping[int, int] | None:
        """containerPort -> the loopback port it listens on, for a running model service's pod."""
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            process = self._running.get(uid)
            if process is None or not process.ports:
                return None
            return dict(process.ports)

    # ---- the rest ----

    def running(self) -> list[dict[str, Any]]:
        """What runs now, for `squall local status`."""
        with self._lock:
            return [
                {
                    "pod": p.stream.pod,
                    "namespace": p.stream.namespace,
                    "pid": p.popen.pid,
                    "processStart": p.start_time,  # what `squall local down` checks before a SIGKILL
                    "stopping": p.kill_at is not None,
                }
                for p in [*self._running.values(), *self._stopping]
            ]

    def close(self, *, wait: float = 10.0) -> None:
        """Stop every process (SIGTERM, then SIGKILL after `wait` at most) and ship what they wrote."""
        with self._lock:
            for process in self._running.values():
                process.kill_at = time.monotonic() + min(process.grace, wait)
                self._stopping.append(process)
            self._running.clear()
            stopping = list(self._stopping)
        for process in stopping:
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + wait
        for process in stopping:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(max(deadline - time.monotonic(), 0.0))
            if process.popen.poll() is None:
                _signal(process, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.popen.wait(5)
        self._closed.set()
        self._shipper.join(10)
        for process in stopping:
            self._drain(process, timeout=1.0)
            shutil.rmtree(process.directory, ignore_errors=True)

    def _job_ports(self, job: tuple[str, str]) -> dict[str, int]:
        """The job's address -> loopback port map (under the lock); the oldest idle jobs' go first."""
        ports = self._ports.get(job)
        if ports is None:
            ports = self._ports[job] = {}
            busy = {p.job for p in [*self._running.values(), *self._stopping]}
            for old in list(self._ports):
                if len(self._ports) <= MAX_JOBS_WITH_PORTS:
                    break
                if old not in busy and old != job:
                    del self._ports[old]
        self._ports.move_to_end(job)
        return ports

    def _argv(self, container: Mapping[str, Any]) -> list[str]:
        return self._local(_command(container, default=["python", "-m", "trainer"]))

    def _local(self, argv: list[str]) -> list[str]:
        """`argv` with `python`/`python3` at its head run as this interpreter."""
        if argv and argv[0] in ("python", "python3"):
            argv[0] = self.python
        return argv

    def _serving_argv(
        self,
        fetch_container: Mapping[str, Any],
        serving: ServingPod,
        *,
        rest_port: int,
        grpc_port: int,
        directory: Path,
    ) -> list[str]:
        """The init container, then (only once it has exited 0) the stand-in in the shell's place."""
        # The pod's files (its `models` volume) are under its directory.
        target = _flags(fetch_container.get("args"))["--target"]
        model_dir = directory / target.lstrip("/")
        fetch = [
            {target: str(model_dir), f"--target={target}": f"--target={model_dir}"}.get(arg, arg)
            for arg in _command(fetch_container, default=())
        ]
        server = [
            self.python,
            "-m",
            MODEL_SERVER_MODULE,
            "--model-dir",
            str(model_dir),
            "--model-name",
            serving.model_name,
            "--model-version",
            str(serving.model_version),
            "--rest-port",
            str(rest_port),
            "--grpc-port",
            str(grpc_port),
        ]
        return ["/bin/sh", "-c", f"{shlex.join(self._local(fetch))} && exec {shlex.join(server)}"]

    def _serving_environment(self, container: Mapping[str, Any], *, pod_name: str) -> dict[str, str]:
        """The pod's environment: the basics, the serving container's env, this squall and the
        worker image's trainer (the stand-in's and fetch-model's code), the endpoint."""
        env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "LC_ALL", "TZ") if key in os.environ}
        env.setdefault("PATH", os.defpath)
        env.update(SERVING_ENV)
        env["HOSTNAME"] = pod_name
        for item in container.get("env") or []:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str) and "value" in item:
                env[item["name"]] = str(item["value"])
        env["PYTHONUNBUFFERED"] = "1"
        paths = (str(SQUALL_PATH), env.get("PYTHONPATH"), self.trainer_path and str(self.trainer_path))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env.update(self.credentials)
        env["AWS_DEFAULT_REGION"] = env["AWS_REGION"] = self.region
        env["AWS_ENDPOINT_URL"] = self.endpoint
        return env

    def _environment(
        self, container: Mapping[str, Any], *, pod_name: str, directory: Path, ports: dict[str, int]
    ) -> dict[str, str]:
        env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "LC_ALL", "TZ") if key in os.environ}
        env.setdefault("PATH", os.defpath)
        env.update(self.image_env)
        env["HOSTNAME"] = pod_name
        env["PYTHONUNBUFFERED"] = "1"  # the log shipper reads lines as they come
        for item in container.get("env") or []:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str) and "value" in item:
                env[item["name"]] = str(item["value"])
        if "TF_CONFIG" in env:
            with self._lock:
                env["TF_CONFIG"] = map_tf_config(env["TF_CONFIG"], ports, free_port)
        paths = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        if self.trainer_path is not None:
            paths.append(str(self.trainer_path))
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        env["SQUALL_CODE_DIR"] = str(directory)
        env.update(self.credentials)
        env["AWS_DEFAULT_REGION"] = env["AWS_REGION"] = self.region
        env["AWS_ENDPOINT_URL"] = self.endpoint
        return env

    # ---- logs ----

    def _create_stream(self, stream: ContainerStream) -> None:
        try:
            self._logs.create_log_stream(logGroupName=self.log_group, logStreamName=stream.name)
        except Exception as exc:  # the endpoint is ours: a failure is logged, the pod still runs
            logger.warning("cannot create log stream", extra={"stream": stream.name, "error": str(exc)})

    def _ship_loop(self) -> None:
        while not self._closed.wait(FLUSH_SECONDS):
            with self._lock:
                processes = [*self._running.values(), *self._stopping]
            now = time.monotonic()
            for process in processes:
                self._flush(process, final=False)
                if process.kill_at is not None and process.popen.poll() is None and now >= process.kill_at:
                    _signal(process, signal.SIGKILL)
            self._reap()

    def _reap(self) -> None:
        """Stopped processes that have exited: their last lines shipped, their directory gone."""
        with self._lock:
            done = [p for p in self._stopping if p.popen.poll() is not None]
        for process in done:
            self._drain(process)
            shutil.rmtree(process.directory, ignore_errors=True)
            with self._lock:
                code = process.popen.returncode
                process.exit_code = _exit_code(code)
                if process in self._stopping:
                    self._stopping.remove(process)

    def _drain(self, process: _Process, *, timeout: float = READERS_JOIN_SECONDS) -> None:
        """An exited process's last lines: read to the end of its pipes (they close when it
        and its children have exited), shipping as they come so a full buffer cannot stall it."""
        deadline = time.monotonic() + timeout
        for reader in process.readers:
            while reader.is_alive() and time.monotonic() < deadline:
                self._flush(process, final=False)
                reader.join(0.05)
        self._flush(process, final=True)

    def _flush(self, process: _Process, *, final: bool) -> None:
        """Ship what the process has written, in PutLogEvents batches."""
        with process.flushing:
            self._flush_locked(process, final=final)

    def _flush_locked(self, process: _Process, *, final: bool) -> None:
        while True:
            batch: list[dict[str, Any]] = []
            size = 0
            while len(batch) < BATCH_EVENTS:
                try:
                    item = process.lines.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    continue
                millis, stream_name, text = item
                message = json.dumps(
                    {
                        "log": text,
                        "stream": stream_name,
                        "time": datetime.fromtimestamp(millis / 1000, UTC).isoformat().replace("+00:00", "Z"),
                        "kubernetes": {
                            "pod_name": process.stream.pod,
                            "namespace_name": process.stream.namespace,
                            "container_name": process.stream.container,
                            "docker_id": process.stream.container_id,
                            "host": process.stream.host,
                        },
                    },
                    ensure_ascii=False,
                )
                batch.append({"timestamp": millis, "message": message})
                size += len(message.encode()) + EVENT_OVERHEAD
                if size >= BATCH_BYTES:
                    break
            if not batch:
                return
            batch.sort(key=lambda e: e["timestamp"])  # stable: stdout/stderr interleave in order
            try:
                self._logs.put_log_events(
                    logGroupName=self.log_group, logStreamName=process.stream.name, logEvents=batch
                )
                process.shipped += len(batch)
            except Exception as exc:  # never retried without end: counted and logged
                process.dropped += len(batch)
                logger.warning(
                    "cannot ship log events", extra={"stream": process.stream.name, "error": str(exc)}
                )
            if not final and process.lines.empty():
                return


def _spawn(argv: Sequence[str], *, directory: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """A container's process, its output piped for the log shipper."""
    return subprocess.Popen(
        argv,
        cwd=directory,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: SIGTERM reaches its children too
    )


def _read_lines(pipe: IO[bytes], stream_name: str, lines: queue.Queue[tuple[int, str, str] | None]) -> None:
    last = 0
    with pipe:
        while True:
            chunk = pipe.readline(LINE_CHUNK)
            if not chunk:
                return
            millis = max(int(time.time() * 1000), last)
            last = millis
            lines.put((millis, stream_name, chunk.decode("utf-8", "replace")))


def _signal(process: _Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.popen.pid, signum)


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code
