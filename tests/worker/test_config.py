"""Flags, Squall's environment (checkpoint/output URIs, sweep parameters), errors."""

from __future__ import annotations

import pytest
from trainer.config import ConfigError, parse_config


def test_flags_become_the_config() -> None:
    config = parse_config(["--model-dir", "/m", "--lr", "0.001", "--batch-size", "32"], {})

    assert config.learning_rate == 0.001
    assert config.batch_size == 32
    assert config.export_dir == "/m/saved_model"


def test_squall_environment_supplies_per_job_model_and_export_dirs() -> None:
    environ = {
        "SQUALL_CHECKPOINT_URI": "s3://bucket/ckpt",
        "SQUALL_OUTPUT_URI": "s3://bucket/out/",
        "SQUALL_JOB_ID": "gan-1",
    }

    config = parse_config([], environ)

    assert config.model_dir == "s3://bucket/ckpt/gan-1"
    assert config.export_dir == "s3://bucket/out/gan-1"


def test_flags_win_over_the_environment() -> None:
    environ = {"SQUALL_CHECKPOINT_URI": "s3://bucket/ckpt", "SQUALL_JOB_ID": "gan-1"}

    config = parse_config(["--model-dir", "/resume/from/here"], environ)

    assert config.model_dir == "/resume/from/here"


def test_export_defaults_to_a_folder_of_an_s3_model_dir() -> None:
    config = parse_config(["--model-dir", "s3://bucket/run/"], {})

    assert config.export_dir == "s3://bucket/run/saved_model"


def test_sweep_parameters_override_the_jobs_flags() -> None:
    # As Squall renders them: SQUALL_PARAM_<NAME.upper()>, values as str(value).
    environ = {"SQUALL_PARAM_LR": "0.0001", "SQUALL_PARAM_BATCH_SIZE": "128", "SQUALL_PARAM_SEED": "7"}

    config = parse_config(["--model-dir", "/m", "--lr", "0.01", "--batch-size", "32"], environ)

    assert (config.learning_rate, config.batch_size, config.seed) == (0.0001, 128, 7)


def test_unknown_sweep_parameter_is_an_error_not_a_silent_default() -> None:
    with pytest.raises(ConfigError, match="SQUALL_PARAM_LEARNIN_RATE is not a hyperparameter"):
        parse_config(["--model-dir", "/m"], {"SQUALL_PARAM_LEARNIN_RATE": "0.1"})


def test_sweep_parameter_of_the_wrong_type_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"SQUALL_PARAM_BATCH_SIZE='1e3' is not a valid int"):
        parse_config(["--model-dir", "/m"], {"SQUALL_PARAM_BATCH_SIZE": "1e3"})


def test_model_dir_is_required() -> None:
    with pytest.raises(ConfigError, match="--model-dir is required"):
        parse_config([], {})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "0"], "steps must be positive"),
        (["--image-size", "30"], "image_size must be a multiple of 4"),
        (["--label-smoothing", "0.5"], r"label_smoothing must be in \[0, 0.5\)"),
        (["--beta1", "1"], r"beta1 must be in \[0, 1\)"),
    ],
)
def test_out_of_range_values_are_rejected(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(["--model-dir", "/m", *flags], {})


def test_unknown_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unrecognized arguments: --learning-rat 1"):
        parse_config(["--model-dir", "/m", "--learning-rat", "1"], {})


def test_trials_of_a_sweep_as_squall_renders_them() -> None:
    # Squall's own sweep expansion and rendering: values arrive both as
    # --<name>=<value> args (the name as the sweep spells it) and as env vars.
    from squall.core.manifests import render
    from squall.core.spec import expand_sweep, parse_spec

    spec = parse_spec(
        {
            "name": "gan",
            "team": "research",
            "image": "registry.local/tf-trainer:1.0",
            "args": ["--steps", "100", "--batch-size", "32"],
            "checkpointUri": "s3://bucket/ckpt",
            "outputUri": "s3://bucket/out",
            "sweep": {"parameters": {"lr": [0.001, 0.0001], "batch_size": [64]}},
        },
        teams=["research"],
        registries=["registry.local"],
    )
    configs = []
    for trial_id, trial in expand_sweep(spec, job_id="gan-1"):
        (job,) = [m for m in render(trial, job_id=trial_id, namespace="ns") if m["kind"] == "Job"]
        (container,) = job["spec"]["template"]["spec"]["containers"]
        environ = {e["name"]: e["value"] for e in container["env"]}
        configs.append(parse_config(container["args"], environ))

    assert [(c.learning_rate, c.batch_size, c.steps) for c in configs] == [
        (0.001, 64, 100),
        (0.0001, 64, 100),
    ]
    # Same URIs in the spec, separate directories per trial.
    assert [c.model_dir for c in configs] == ["s3://bucket/ckpt/gan-1-t000", "s3://bucket/ckpt/gan-1-t001"]
    assert [c.export_dir for c in configs] == ["s3://bucket/out/gan-1-t000", "s3://bucket/out/gan-1-t001"]
