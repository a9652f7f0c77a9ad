"""The training loop: GAN steps under a tf.distribute strategy, checkpoints that
survive the pod, TensorBoard summaries, and a SavedModel at the end.

Layout of the model dir (local path or s3:// URI)::

    checkpoints/ckpt-<step>.*   tf.train.CheckpointManager, numbered by step
    checkpoints/checkpoint      its index, naming the latest
    checkpoints/squall-checkpoint.json   the report to Squall of the latest (report.py)
    logs/                       TensorBoard event files (chief only)

and of the export dir: a SavedModel of the generator, ``serving_default`` taking
``noise`` (batch, latent_dim) and returning ``images`` (batch, size, size, 1).

A re-run of the same pod (Squall re-runs a replica after a drain or a spot
reclaim) restores the latest checkpoint and carries on from its step; a run that
finds training already complete only exports again.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from trainer import evaluate
from trainer.config import TrainConfig
from trainer.data import ImageSource, open_source
from trainer.logs import emit_metric, get_logger, report_metrics
from trainer.model import build_discriminator, build_generator
from trainer.preemption import PreemptionWatcher
from trainer.report import write_report
from trainer.storage import Mirror, mirror
from trainer.tf_config import Mode, TFConfig

log = get_logger(__name__)

GRID = 8  # the TensorBoard sample grid is GRID x GRID images
# What a lost peer looks like from inside a collective or an RPC: the step fails
# with one of these instead of hanging (TensorFlow's coordination service notices
# the missing heartbeat). The whole job restarts from the last checkpoint.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)


class TrainingError(RuntimeError):
    """Training cannot go on, and re-running it would not help (e.g. NaN losses)."""


class PeerLost(RuntimeError):
    """Another task of a distributed job went away; a re-run of all resumes."""


@dataclass(frozen=True)
class Outcome:
    step: int
    preempted: bool = False
    reason: str = "done"
    metric: float | None = None


@dataclass(frozen=True)
class Paths:
    checkpoints: Mirror
    logs: Mirror
    export: Mirror
    scratch: Path  # where a non-chief writes what TensorFlow insists it writes


def run(
    config: TrainConfig,
    *,
    strategy: tf.distribute.Strategy,
    tf_config: TFConfig | None,
    watcher: PreemptionWatcher,
) -> Outcome:
    trainer = GanTrainer(config, strategy=strategy, tf_config=tf_config, watcher=watcher)
    try:
        return trainer.fit()
    except PEER_ERRORS as exc:
        if tf_config is None:
            raise
        raise PeerLost(f"{type(exc).__name__}: {exc.message}") from exc


class GanTrainer:
    def __init__(
        self,
        config: TrainConfig,
        *,
        strategy: tf.distribute.Strategy,
        tf_config: TFConfig | None,
        watcher: PreemptionWatcher,
    ) -> None:
        self.config = config
        self.strategy = strategy
        self.watcher = watcher
        self.mode = tf_config.mode if tf_config else Mode.LOCAL
        self.is_chief = tf_config.is_chief if tf_config else True
        replicas = strategy.num_replicas_in_sync
        if config.batch_size % replicas:
            raise TrainingError(
                f"batch_size {config.batch_size} does not split evenly over {replicas} replicas"
            )
        keras.utils.set_random_seed(config.seed)
        self.data_seed: int | None = config.seed
        self._samples_step = -1

        work = Path(config.work_dir or tempfile.mkdtemp(prefix="trainer-"))
        self.paths = Paths(
            checkpoints=mirror(
                _join(config.model_dir, "checkpoints"), staging=work / "model" / "checkpoints"
            ),
            logs=mirror(_join(config.model_dir, "logs"), staging=work / "model" / "logs", prune=False),
            export=mirror(config.export_dir, staging=work / "export"),
            scratch=work / "scratch",
        )
        self.source: ImageSource = open_source(
            config.data, image_size=config.image_size, staging=work / "data"
        )
        self._build()
        self._restore()
        self.writer = (
            tf.summary.create_file_writer(str(self.paths.logs.local))
            if self.is_chief
            else tf.summary.create_noop_writer()
        )
        # The same noise for every sample grid, so TensorBoard shows one set of
        # samples evolving rather than a fresh random draw each time.
        self.grid_noise = tf.constant(
            np.random.default_rng(config.seed).normal(size=(GRID * GRID, config.latent_dim)), tf.float32
        )

    # ---- set-up ---------------------------------------------------------------

    def _build(self) -> None:
        c = self.config
        with self.strategy.scope():
            self.generator = build_generator(latent_dim=c.latent_dim, width=c.width, image_size=c.image_size)
            self.discriminator = build_discriminator(
                width=c.width, image_size=c.image_size, md_kernels=c.md_kernels, md_dim=c.md_dim
            )
            self.g_opt = keras.optimizers.Adam(c.learning_rate, beta_1=c.beta1)
            self.d_opt = keras.optimizers.Adam(c.learning_rate, beta_1=c.beta1)
            # Slots now rather than at the first apply: a restore then finds every
            # variable it names, and the first step is not a special case.
            self.g_opt.build(self.generator.trainable_variables)
            self.d_opt.build(self.discriminator.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.checkpoint = tf.train.Checkpoint(
            step=self.step,
            generator=self.generator,
            discriminator=self.discriminator,
            generator_optimizer=self.g_opt,
            discriminator_optimizer=self.d_opt,
        )

    def _restore(self) -> None:
        # Every task restores, from the chief's checkpoints, so that all start from
        # the same step; only the chief saves there. TensorFlow's multi-worker
        # guidance is that every worker also calls save (it may run collectives),
        # so the others save into local scratch space that nobody reads.
        self.paths.checkpoints.pull()
        latest = tf.train.latest_checkpoint(str(self.paths.checkpoints.local))
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            log.info("restored", checkpoint=Path(latest).name, step=int(self.step.numpy()))
        else:
            log.info("starting from scratch", model_dir=self.config.model_dir)
        directory = self.paths.checkpoints.local if self.is_chief else self.paths.scratch / "checkpoints"
        self.manager = tf.train.CheckpointManager(
            self.checkpoint,
            str(directory),
            max_to_keep=self.config.keep_checkpoints if self.is_chief else 1,
            checkpoint_name="ckpt",
            step_counter=self.step,
        )

    # ---- the step -------------------------------------------------------------

    def _replica_step(self, real: tf.Tensor, stop: tf.Tensor) -> tf.Tensor:
        c = self.config
        context = tf.distribute.get_replica_context()
        batch = tf.shape(real)[0]
        # Stateless noise keyed by (seed, step, replica): every replica of every
        # worker draws different noise, and a resumed run draws what an
        # uninterrupted one would have.
        replica = tf.cast(context.replica_id_in_sync_group, tf.int64)
        key = tf.stack(
            [tf.constant(c.seed, tf.int64), self.step * self.strategy.num_replicas_in_sync + replica]
        )
        noise = tf.random.stateless_normal((batch, c.latent_dim), seed=key)
        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
            fake = self.generator(noise, training=True)
            real_logits = self.discriminator(real, training=True)
            fake_logits = self.discriminator(fake, training=True)
            # One-sided label smoothing (Salimans et al. 3.4): soften only the real
            # targets, so the discriminator is not rewarded for certainty.
            real_target = tf.fill(tf.shape(real_logits), 1.0 - c.label_smoothing)
            d_loss = self._average(
                _bce(real_target, real_logits) + _bce(tf.zeros_like(fake_logits), fake_logits)
            )
            # Non-saturating generator loss: -log D(G(z)).
            g_loss = self._average(_bce(tf.ones_like(fake_logits), fake_logits))
        d_grads = d_tape.gradient(d_loss, self.discriminator.trainable_variables)
        g_grads = g_tape.gradient(g_loss, self.generator.trainable_variables)
        self.d_opt.apply_gradients(zip(d_grads, self.discriminator.trainable_variables, strict=True))
        self.g_opt.apply_gradients(zip(g_grads, self.generator.trainable_variables, strict=True))
        # Summed over replicas below: the losses are already scaled by the global
        # batch, and `stop` counts the replicas whose task was told to stop.
        return tf.stack([d_loss, g_loss, stop])

    def _average(self, per_example: tf.Tensor) -> tf.Tensor:
        return tf.nn.compute_average_loss(
            tf.reshape(per_example, [-1]), global_batch_size=self.config.batch_size
        )

    def _make_step_fn(self) -> Any:
        @tf.function
        def step_fn(iterator: Any, stop: tf.Tensor) -> tf.Tensor:
            stats = self.strategy.run(self._replica_step, args=(next(iterator), stop))
            self.step.assign_add(1)
            # Under MultiWorkerMirroredStrategy this is an all-reduce over every
            # worker: all see the same losses and the same stop decision, so all
            # save the same step and leave together.
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, stats, axis=None)

        return step_fn

    def _dataset_fn(self, context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = context.get_per_replica_batch_size(self.config.batch_size)
        return self.source.dataset(batch_size=per_replica, seed=self.data_seed, input_context=context)

    # ---- the loop -------------------------------------------------------------

    def fit(self) -> Outcome:
        start = int(self.step.numpy())
        # The shuffle seed moves with the step a run starts from, so a resumed run
        # does not replay the batches its predecessor began with. Asynchronous
        # parameter-server workers each read the whole dataset; unseeded, each
        # reads it in its own order.
        self.data_seed = None if self.mode is Mode.COORDINATOR else self.config.seed + start
        log.info(
            "training",
            mode=self.mode.value,
            chief=self.is_chief,
            replicas=self.strategy.num_replicas_in_sync,
            data=self.source.name,
            start_step=start,
            steps=self.config.steps,
        )
        fit = self._fit_parameter_server if self.mode is Mode.COORDINATOR else self._fit_synchronous
        outcome = fit()
        if outcome.preempted:
            return outcome
        return self._finish(outcome.step)

    def _fit_synchronous(self) -> Outcome:
        step_fn = self._make_step_fn()
        iterator = iter(self.strategy.distribute_datasets_from_function(self._dataset_fn))
        step = int(self.step.numpy())
        while step < self.config.steps:
            stop = tf.constant(1.0 if self.watcher.requested else 0.0)
            d_loss, g_loss, stopping = step_fn(iterator, stop).numpy().tolist()
            previous, step = step, int(self.step.numpy())
            self._after_steps(previous, step, d_loss=d_loss, g_loss=g_loss)
            if stopping > 0:
                reason = "preempted" if self.watcher.requested else "peer preempted"
                self._save(step, reason=reason)
                return Outcome(step=step, preempted=True, reason=reason)
            if _crossed(previous, step, self.config.checkpoint_every):
                self._save(step, reason="periodic")
        return Outcome(step=step)

    def _fit_parameter_server(self) -> Outcome:
        # Steps run asynchronously on the workers; the coordinator schedules them
        # in chunks and, between chunks, logs, checkpoints and checks for SIGTERM.
        coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        step_fn = self._make_step_fn()

        @tf.function
        def per_worker_dataset() -> Any:
            return self.strategy.distribute_datasets_from_function(self._dataset_fn)

        iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))
        no_stop = tf.constant(0.0)
        step = int(self.step.numpy())
        while step < self.config.steps:
            chunk = min(self.config.log_every, self.config.steps - step)
            results = [coordinator.schedule(step_fn, args=(iterator, no_stop)) for _ in range(chunk)]
            coordinator.join()
            previous, step = step, int(self.step.numpy())
            d_loss, g_loss, _ = results[-1].fetch().tolist()
            self._after_steps(previous, step, d_loss=d_loss, g_loss=g_loss)
            if self.watcher.requested:
                self._save(step, reason="preempted")
                return Outcome(step=step, preempted=True, reason="preempted")
            if _crossed(previous, step, self.config.checkpoint_every):
                self._save(step, reason="periodic")
        return Outcome(step=step)

    def _after_steps(self, previous: int, step: int, *, d_loss: float, g_loss: float) -> None:
        """Bookkeeping after the steps from ``previous`` to ``step``: one step when
        synchronous, a chunk of them under a parameter-server coordinator."""
        if not (np.isfinite(d_loss) and np.isfinite(g_loss)):
            # Saving now would overwrite good checkpoints with a broken model.
            raise TrainingError(f"non-finite loss at step {step}: d_loss={d_loss} g_loss={g_loss}")
        if _crossed(previous, step, self.config.log_every) or step == self.config.steps:
            log.info("step", step=step, d_loss=round(d_loss, 5), g_loss=round(g_loss, 5))
            with self.writer.as_default(step=step):
                tf.summary.scalar("loss/discriminator", d_loss)
                tf.summary.scalar("loss/generator", g_loss)
            if self.is_chief:  # every worker sees the same all-reduced losses: one reports
                report_metrics({"train/d_loss": d_loss, "train/g_loss": g_loss}, step=step)
        if self.is_chief and _crossed(previous, step, self.config.image_every):
            self._write_samples(step)
        # The last step is evaluated by _finish, after the export.
        if self.is_chief and _crossed(previous, step, self.config.eval_every) and step < self.config.steps:
            self._metric(self._plain_generator(), step=step)

    # ---- persistence ----------------------------------------------------------

    def _save(self, step: int, *, reason: str) -> None:
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            return
        self.writer.flush()
        write_report(self.paths.checkpoints.local, step=step, checkpoint=Path(path).name, reason=reason)
        self.paths.checkpoints.push()
        self.paths.logs.push()
        log.info("checkpoint saved", step=step, reason=reason, checkpoint=Path(path).name)

    def _write_samples(self, step: int) -> None:
        if step == self._samples_step:  # the final step may also be an image_every step
            return
        self._samples_step = step
        images = self.generator(self.grid_noise, training=False)
        with self.writer.as_default(step=step):
            tf.summary.image("samples", image_grid(images, GRID)[tf.newaxis], max_outputs=1)

    def _finish(self, step: int) -> Outcome:
        if self.manager.latest_checkpoint is None or not self.manager.latest_checkpoint.endswith(f"-{step}"):
            self._save(step, reason="final")
        if not self.is_chief:
            return Outcome(step=step)
        self._write_samples(step)
        self.writer.flush()
        self.paths.logs.push()
        generator = self._plain_generator()
        self._export(generator)
        metric = self._metric(generator, step=step)
        emit_metric(evaluate.METRIC, metric)
        return Outcome(step=step, metric=metric)

    def _plain_generator(self) -> keras.Model:
        """A copy of the generator with ordinary variables, outside the strategy:
        what the SavedModel holds (so it loads on any single device), and what the
        chief evaluates with, since a model built in a multi-worker scope would
        try to run its predict on every worker."""
        c = self.config
        plain = build_generator(latent_dim=c.latent_dim, width=c.width, image_size=c.image_size)
        plain.set_weights(self.generator.get_weights())
        return plain

    def _export(self, generator: keras.Model) -> None:
        latent_dim = self.config.latent_dim
        target = self.paths.export.local
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        archive = keras.export.ExportArchive()
        archive.track(generator)
        archive.add_endpoint(
            "serving_default",
            lambda noise: {"images": generator(noise, training=False)},
            input_signature=[tf.TensorSpec((None, latent_dim), tf.float32, name="noise")],
        )
        archive.write_out(str(staging), verbose=False)
        # Replace, never merge: a re-run must not leave files of an older export.
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
        self.paths.export.push()
        log.info("exported", export_dir=self.config.export_dir, step=int(self.step.numpy()))

    def _metric(self, generator: keras.Model, *, step: int) -> float:
        """Evaluates the generator and reports it to Squall as of `step`. The same real
        samples and noise every time, so the values of one run (and of the trials of a
        sweep on one dataset) are comparable step for step."""
        c = self.config
        real = self.source.sample(c.eval_samples, seed=c.seed)
        noise = np.random.default_rng(c.seed + 1).normal(size=(c.eval_samples, c.latent_dim))
        generated = generator.predict(noise.astype(np.float32), batch_size=256, verbose=0)
        value = evaluate.frechet_distance(real, generated)
        log.info(
            "evaluated",
            metric=evaluate.METRIC,
            value=value,
            step=step,
            real=len(real),
            generated=len(generated),
        )
        report_metrics(evaluate.reported(value), step=step)
        return value


def image_grid(images: tf.Tensor, rows: int) -> tf.Tensor:
    """(rows*cols, h, w, c) in [-1, 1] -> one (rows*h, cols*w, c) image in [0, 1]."""
    n, h, w, ch = images.shape
    cols = n // rows
    grid = tf.reshape(images[: rows * cols], (rows, cols, h, w, ch))
    grid = tf.transpose(grid, (0, 2, 1, 3, 4))
    return (tf.reshape(grid, (rows * h, cols * w, ch)) + 1.0) / 2.0


def _crossed(previous: int, step: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in (previous, step]."""
    return step // every > previous // every


def _bce(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"
