"""TF_CONFIG -> a tf.distribute strategy (or a parameter server that just serves).

- no TF_CONFIG: this machine's devices; MirroredStrategy when it has several GPUs,
  else the default strategy;
- chief and workers: MultiWorkerMirroredStrategy, synchronous all-reduce;
- with ps: ParameterServerStrategy; the chief coordinates, ps and workers run a
  tf.distribute.Server and wait to be given work.
"""

from __future__ import annotations

import os

import tensorflow as tf

from trainer.logs import get_logger
from trainer.tf_config import Mode, TFConfig

log = get_logger(__name__)


def create_strategy(tf_config: TFConfig | None) -> tf.distribute.Strategy:
    """Must run before any other TensorFlow op: the multi-worker strategies
    configure the runtime's collectives and cannot once it is initialised."""
    gpus = len(tf.config.list_physical_devices("GPU"))
    if tf_config is None:
        if gpus > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if tf_config.mode is Mode.COLLECTIVE:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=_resolver(tf_config, gpus))
    if tf_config.mode is Mode.COORDINATOR:
        _fail_fast_for_coordinator()
        ps = len(tf_config.cluster["ps"])
        return tf.distribute.ParameterServerStrategy(
            _resolver(tf_config, gpus),
            # Spread large variables (the generator's first Dense) over every ps.
            variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
                min_shard_bytes=256 << 10, max_shards=ps
            ),
        )
    raise ValueError(f"no strategy runs on a {tf_config.task_type} in {tf_config.mode.value} mode")


def serve(tf_config: TFConfig) -> None:
    """A ps or worker of a ParameterServerStrategy job: serve until the pod is
    deleted. Squall counts the job done when the chief completes."""
    _fail_fast_for_coordinator()
    server = tf.distribute.Server(
        tf.train.ClusterSpec(tf_config.training_cluster),
        job_name=tf_config.task_type,
        task_index=tf_config.task_index,
        protocol="grpc",
        start=True,
    )
    log.info("serving", task=tf_config.task_type, index=tf_config.task_index, target=server.target)
    server.join()


def _resolver(tf_config: TFConfig, gpus: int) -> tf.distribute.cluster_resolver.ClusterResolver:
    # Built from the checked TF_CONFIG rather than re-read from the environment, so
    # what TensorFlow connects to is exactly what was validated (less the evaluator).
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf_config.training_cluster),
        task_type=tf_config.task_type,
        task_id=tf_config.task_index,
        rpc_layer="grpc",
        num_accelerators={"GPU": gpus} if gpus else None,
    )


def _fail_fast_for_coordinator() -> None:
    # TensorFlow's advice for ParameterServerStrategy: without it, an RPC to a lost
    # worker retries for minutes instead of failing, and the coordinator cannot
    # reschedule that worker's steps elsewhere.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
