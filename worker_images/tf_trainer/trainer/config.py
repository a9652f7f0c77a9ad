"""Run configuration: flags, then what Squall sets in the environment.

Squall hands a sweep trial its parameter values twice: as ``SQUALL_PARAM_<NAME>``
environment variables and as ``--<name>=<value>`` args appended to the job's args
(the parameter name as written in the sweep, so flags accept ``--batch_size`` as
well as ``--batch-size``). The trial's values win over the job's own flags, since
those are shared by every trial. A parameter this trainer does not know is an
error rather than ignored: a misspelt sweep would otherwise run N identical trials.

Squall also passes the job's ``checkpointUri`` and ``outputUri``. Every trial of a
sweep (and every job reusing a URI) gets the same ones, so the trainer keeps its
files under ``<uri>/<SQUALL_JOB_ID>``: a trial must never resume from, or prune,
another trial's checkpoints. Re-runs of one job keep their id, so they resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

CHECKPOINT_URI_ENV = "SQUALL_CHECKPOINT_URI"
OUTPUT_URI_ENV = "SQUALL_OUTPUT_URI"
JOB_ID_ENV = "SQUALL_JOB_ID"
PARAM_ENV_PREFIX = "SQUALL_PARAM_"


class ConfigError(ValueError):
    """Flags or sweep parameters that cannot be used."""


@dataclass(frozen=True)
class TrainConfig:
    model_dir: str
    export_dir: str
    data: str | None = None
    # Local scratch (S3 staging); on Kubernetes the pod's own disk, lost with it,
    # which is why S3 holds the truth. None: a fresh temporary directory.
    work_dir: str | None = None
    # Hyperparameters (sweepable).
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 2e-4
    beta1: float = 0.5
    latent_dim: int = 64
    width: int = 32
    md_kernels: int = 32
    md_dim: int = 8
    label_smoothing: float = 0.1
    image_size: int = 28
    seed: int = 0
    # Bookkeeping.
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    log_every: int = 50
    image_every: int = 500
    # Steps between evaluations reported to Squall (eval/score): what a sweep's median
    # early stopping compares trials by at a given step. The end of training is always one.
    eval_every: int = 200
    eval_samples: int = 512

    def __post_init__(self) -> None:
        positive = (
            "steps", "batch_size", "latent_dim", "width", "md_kernels", "md_dim",
            "checkpoint_every", "keep_checkpoints", "log_every", "image_every", "eval_every", "eval_samples",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.beta1 < 1:
            raise ConfigError(f"beta1 must be in [0, 1), got {self.beta1}")
        if not 0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")
        # The generator doubles the resolution twice from a size/4 seed.
        if self.image_size < 8 or self.image_size % 4:
            raise ConfigError(f"image_size must be a multiple of 4 and at least 8, got {self.image_size}")


# name -> (type, help). Every one is a flag and a sweepable parameter.
HYPERPARAMETERS: dict[str, tuple[type, str]] = {
    "steps": (int, "training steps in total (a resumed run stops at the same total)"),
    "batch_size": (int, "global batch size, split across all replicas"),
    "learning_rate": (float, "Adam learning rate of both networks"),
    "beta1": (float, "Adam beta_1 (0.5 is the DCGAN choice)"),
    "latent_dim": (int, "size of the generator's noise vector"),
    "width": (int, "filters of the first discriminator / last generator convolution"),
    "md_kernels": (int, "minibatch discrimination kernels (B in Salimans et al.)"),
    "md_dim": (int, "minibatch discrimination kernel dimension (C in Salimans et al.)"),
    "label_smoothing": (float, "one-sided label smoothing of the real targets"),
    "image_size": (int, "height and width images are resized to (multiple of 4)"),
    "seed": (int, "random seed for weights, noise and shuffling"),
}
ALIASES = {"lr": "learning_rate"}


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> TrainConfig:
    sweep = sweep_parameters(environ)  # first: its errors say more than argparse's
    args = _parser().parse_args(argv)
    values: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None}
    values.update(sweep)
    values.setdefault("model_dir", _job_uri(environ, CHECKPOINT_URI_ENV))
    if not values["model_dir"]:
        raise ConfigError(f"--model-dir is required (or set {CHECKPOINT_URI_ENV})")
    values.setdefault(
        "export_dir", _job_uri(environ, OUTPUT_URI_ENV) or _join(values["model_dir"], "saved_model")
    )
    return TrainConfig(**values)


def sweep_parameters(environ: Mapping[str, str]) -> dict[str, Any]:
    """SQUALL_PARAM_* variables, converted to the hyperparameters' types."""
    values: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(PARAM_ENV_PREFIX):
            continue
        name = key[len(PARAM_ENV_PREFIX) :].lower()
        name = ALIASES.get(name, name)
        if name not in HYPERPARAMETERS:
            known = ", ".join(sorted([*HYPERPARAMETERS, *ALIASES]))
            raise ConfigError(
                f"sweep parameter {key} is not a hyperparameter of this trainer; known: {known}"
            )
        kind = HYPERPARAMETERS[name][0]
        try:
            values[name] = kind(raw)
        except ValueError as exc:
            raise ConfigError(f"sweep parameter {key}={raw!r} is not a valid {kind.__name__}") from exc
    return values


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One structured log line and exit 2 (from main), like every other bad input.
        raise ConfigError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m trainer",
        description="Train a DCGAN with minibatch discrimination, distributed as TF_CONFIG says.",
        # Unknown flags are errors: a typo must not silently train with defaults.
        allow_abbrev=False,
    )
    io = parser.add_argument_group("data and storage (local paths or s3:// URIs)")
    io.add_argument(*_flags("data"), help="a .npz, a .tfrecord, or a directory of .tfrecord shards; "
                    "default: scikit-learn's 8x8 digits, upscaled (ships with the image)")  # fmt: skip
    io.add_argument(*_flags("model_dir"), dest="model_dir",
                    help=f"checkpoints and TensorBoard logs (default: ${CHECKPOINT_URI_ENV}/${JOB_ID_ENV})")  # fmt: skip
    io.add_argument(*_flags("export_dir"), dest="export_dir",
                    help=f"SavedModel of the generator (default: ${OUTPUT_URI_ENV}/${JOB_ID_ENV}, "
                    "else MODEL_DIR/saved_model)")  # fmt: skip
    io.add_argument(*_flags("work_dir"), dest="work_dir",
                    help="local scratch for S3 staging (default: a temporary directory)")  # fmt: skip

    hp = parser.add_argument_group("hyperparameters (a sweep trial's values override these)")
    for name, (kind, text) in HYPERPARAMETERS.items():
        flags = _flags(name) + [f for a, target in ALIASES.items() if target == name for f in _flags(a)]
        hp.add_argument(*flags, dest=name, type=kind, help=f"{text} (default: {_default(name)})")

    run = parser.add_argument_group("checkpoints and logging")
    for name, text in {
        "checkpoint_every": "steps between checkpoints (one is also written on SIGTERM)",
        "keep_checkpoints": "checkpoints kept",
        "log_every": "steps between loss logs and TensorBoard scalars",
        "image_every": "steps between TensorBoard sample grids",
        "eval_every": "steps between evaluations reported as squall-metric eval/ lines",
        "eval_samples": "generated samples for each evaluation and the final metric",
    }.items():
        run.add_argument(*_flags(name), dest=name, type=int, help=f"{text} (default: {_default(name)})")
    return parser


def _flags(name: str) -> list[str]:
    """``--batch-size`` and, as Squall's sweep writes it, ``--batch_size``."""
    return sorted({"--" + name.replace("_", "-"), "--" + name}, key=lambda f: "_" in f)


def _job_uri(environ: Mapping[str, str], variable: str) -> str | None:
    base = environ.get(variable, "").strip()
    if not base:
        return None
    job_id = environ.get(JOB_ID_ENV, "").strip()
    return _join(base, job_id) if job_id else base


def _default(name: str) -> Any:
    return next(f.default for f in dataclasses.fields(TrainConfig) if f.name == name)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if base.startswith("s3://") else os.path.join(base, name)
