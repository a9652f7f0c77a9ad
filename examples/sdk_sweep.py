"""A hyperparameter sweep from Python with Squall's SDK, notebook style: submit it with its
code, wait for it, read the ranking, serve the best trial's model and ask it for a prediction.

    eval "$(.venv/bin/squall local up)"        # or a deployment's variables (README: "The SDK")
    .venv/bin/python examples/sdk_sweep.py --code worker_images/tf_trainer

The sweep searches the example trainer's learning rate (log scale) and batch size with TPE,
stops hopeless trials early by the median rule, and ranks trials by eval/score, which the
trainer reports with `squall-metric eval/score=... step=...` lines on its output. Every
call below raises squall.CommandError (its `.code` is the `squall` command's exit code)
on bad input or a job that is not there, as the command would refuse it.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from squall import Client

# The example trainer (worker_images/tf_trainer), small enough for a laptop's CPUs: each trial
# gets --learning_rate=... --batch_size=... from its parameters, after these.
TRAINER_FLAGS = (
    "--steps 400 --width 4 --latent-dim 8 --md-kernels 4 --md-dim 4 --eval-samples 64 --eval-every 100"
)
SWEEP: dict[str, Any] = {
    "name": "gan-tpe",
    "team": "research",
    "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer:1.0",
    "command": ["python", "-m", "trainer"],
    "args": shlex.split(TRAINER_FLAGS),
    "resources": {"cpu": "2", "memory": "4Gi"},
    "checkpointUri": "s3://squall-artifacts/teams/research/checkpoints",
    "outputUri": "s3://squall-artifacts/teams/research/models",
    "maxRuntime": "2h",
    "sweep": {
        "parameters": {
            "learning_rate": {"min": 0.0001, "max": 0.01, "log": True},
            "batch_size": [16, 32],
        },
        "strategy": "tpe",
        "maxTrials": 8,
        "parallelism": 2,
        "seed": 7,
        "objective": {"metric": "eval/score", "goal": "maximize"},
        "earlyStopping": {"rule": "median", "minSteps": 200, "minTrials": 3},
    },
}
LATENT_DIM = 8  # the generator's input: `noise` of (batch, LATENT_DIM)


def run(client: Client, *, code: str, out: TextIO = sys.stdout, timeout: float = 4 * 3600) -> int:
    """Submit, wait, rank, serve, predict; 0 when the best trial's model answered."""
    # 1. Submit: the spec is checked as the submit function checks it, the code packed and
    #    uploaded once per content, then the sweep goes to the jobs queue.
    sweep_id = client.submit(SWEEP, code=code)
    print(f"submitted sweep {sweep_id}", file=out)

    # 2. Wait until every trial has ended (its record appears once the queue is read).
    sweep = client.wait(sweep_id, timeout=timeout, poll=10, wait_for_record=120)
    print(f"{sweep_id} {sweep.status.value} ({sweep.reason})", file=out)

    # 3. The trials ranked by eval/score, best first; those that reported nothing last.
    results = client.sweep_results(sweep_id)
    for rank, trial in enumerate(results.trials, start=1):
        value = "-" if trial.value is None else f"{trial.value:.4g} (step {trial.step})"
        print(
            f"{rank:>2}. {trial.id}  {trial.status.value:<9} {trial.reason:<13} {value:<18} {trial.parameters}",
            file=out,
        )
    if results.best is None:
        said = "no trial reported" if results.unreported else "no trial that finished reported"
        print(f"{said} {results.objective_metric}: nothing to serve", file=out)
        return 1
    best = results.best
    print(f"best: {best.id} with {results.objective_metric} {best.value:.4g}: {best.parameters}", file=out)

    # 4. Serve the best trial's SavedModel, and wait until it answers.
    request = client.serve(best.id, name="gan-best")
    service = client.wait_service(request, out=out)
    if service.rest_url is None:
        print(f"model service {service.name} is {service.status.value} ({service.reason})", file=out)
        return 1

    # 5. Ask it for two generated images.
    noise = [[random.gauss(0.0, 1.0) for _ in range(LATENT_DIM)] for _ in range(2)]
    answer = client.predict(service.name, {"instances": noise})
    print(f"{service.name} answered {len(answer['predictions'])} predictions", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    from squall import Client, CommandError

    parser = argparse.ArgumentParser(
        description="A sweep with Squall's SDK: submit it, wait, rank the trials, serve the best, predict."
    )
    parser.add_argument("--code", default="worker_images/tf_trainer", help="the trainer's directory")
    parser.add_argument(
        "--local", action="store_true", help="the running `squall local up` (else: this shell's environment)"
    )
    args = parser.parse_args(argv)
    try:
        client = Client.local() if args.local else Client()
        return run(client, code=args.code)
    except CommandError as exc:
        print(f"sdk_sweep: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
