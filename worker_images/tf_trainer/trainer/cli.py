"""``python -m trainer``: configuration, role, strategy, training, exit code.

Flags and TF_CONFIG are checked before TensorFlow is imported (seconds), so a
bad job fails fast, with one log line naming the problem and exit code 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from trainer import exits, logs
from trainer.config import ConfigError, parse_config
from trainer.preemption import PreemptionWatcher
from trainer.tf_config import Mode, TFConfigError, read_tf_config

log = logs.get_logger("trainer")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    logs.configure()
    try:
        config = parse_config(argv, environ)
        tf_config = read_tf_config(environ)
    except (ConfigError, TFConfigError) as exc:
        log.error("invalid configuration", error=str(exc))
        return exits.USAGE
    mode = tf_config.mode if tf_config else Mode.LOCAL
    task = f"{tf_config.task_type}:{tf_config.task_index}" if tf_config else "local"
    log.info("starting", mode=mode.value, task=task, model_dir=config.model_dir, export_dir=config.export_dir)
    if mode is Mode.EVALUATOR:
        log.error(
            "invalid configuration", error="this trainer has no evaluator role; drop the evaluator replica"
        )
        return exits.USAGE

    # Heavy imports from here on.
    from trainer import strategy as strategies
    from trainer import train
    from trainer.data import DataError
    from trainer.storage import StorageError

    if mode is Mode.SERVER and tf_config is not None:
        strategies.serve(tf_config)
        return exits.OK
    try:
        # Before anything else touches TensorFlow: see create_strategy.
        strategy = strategies.create_strategy(tf_config)
    except Exception as exc:
        log.error("could not set up distribution", error=f"{type(exc).__name__}: {exc}", exc_info=True)
        return exits.FAILED
    with PreemptionWatcher() as watcher:
        try:
            outcome = train.run(config, strategy=strategy, tf_config=tf_config, watcher=watcher)
        except train.PeerLost as exc:
            log.error("peer lost", error=str(exc), resume="from the last checkpoint")
            return exits.RETRY
        except (DataError, StorageError, train.TrainingError) as exc:
            log.error("training failed", error=str(exc))
            return exits.FAILED
        except Exception as exc:
            log.error("training failed", error=f"{type(exc).__name__}: {exc}", exc_info=True)
            return exits.FAILED
    if outcome.preempted:
        log.warning("stopped early", step=outcome.step, reason=outcome.reason, resume="from this step")
        return exits.RETRY
    log.info("done", step=outcome.step)
    return exits.OK
