"""The bundled example trainer: a tiny MLP on scikit-learn's digits, in whatever style tfctl asks.

tfctl starts every task with the same command line; this script reads the environment to learn
its role, so one file covers the four ways people run TensorFlow across machines:

- ``--ps_hosts/--worker_hosts/--job_name/--task_index`` given: classic between-graph training
  (``tf.compat.v1``; ps tasks serve forever, worker 0 is the chief).
- ``TF_CONFIG`` with a ``ps`` job: ``ParameterServerStrategy``; the chief coordinates, ps and
  worker tasks only serve forever.
- ``TF_CONFIG`` without ``ps``: ``MultiWorkerMirroredStrategy``; the chief, else worker 0, owns
  the result.
- neither: one process; with ``--strategy mirrored`` a ``MirroredStrategy`` over every GPU the
  process sees (tfctl's ``mirrored`` strategy: one such process per host). On a machine without
  GPUs ``--cpu_devices N`` splits the CPU into N logical devices, so the same code runs as it
  would over N GPUs.

Every style resumes: a restarted task restores the latest checkpoint of its train dir and goes
on from its global step, which never goes back.

No Keras: the model is two (kernel, bias) pairs in a ``tf.Module`` with hand-written SGD, because
Keras 3 training breaks under both multi-worker strategies (docs/field-notes.md §2).
Every style writes the same checkpoint tensor keys (``model/<name>/.ATTRIBUTES/VARIABLE_VALUE`` and
``step/.ATTRIBUTES/VARIABLE_VALUE``) as ``<train_dir>/ckpt/ckpt-<step>``, so evaluate.py reads
them all the same way. ``--steps`` always counts optimizer updates (the global step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np
import tensorflow as tf
from digits import (
    CHECKPOINT_NAME,
    CHECKPOINT_SUBDIR,
    STEP_KEY,
    STOP_GRACE_SECS,
    VARIABLE_NAMES,
    WORKER_POLL_SECS,
    DigitsMLP,
    Window,
    due,
    finish,
    load_digits_split,
    loss_and_accuracy,
    prepare_result_dir,
    variable_key,
    write_scalars,
)


def make_dataset_fn(images: np.ndarray, labels: np.ndarray, batch_size: int, shard: bool) -> Any:
    """A tf.distribute dataset_fn: repeated, shuffled batches of `batch_size` per replica."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        if shard:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        dataset = dataset.shuffle(len(labels)).repeat()
        return dataset.batch(batch_size, drop_remainder=True).prefetch(2)

    return dataset_fn


def build_tf2_training(strategy: tf.distribute.Strategy, learning_rate: float,
                       num_features: int) -> tuple[DigitsMLP, tf.Variable, Any]:
    """(model, step variable, train_step) for the TF2 styles; train_step(iterator) -> means."""
    with strategy.scope():
        model = DigitsMLP(num_features)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def replica_step(images: Any, labels: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            loss, accuracy = loss_and_accuracy(model(images), labels)
        variables = [getattr(model, name) for name in VARIABLE_NAMES]
        for variable, gradient in zip(variables, tape.gradient(loss, variables), strict=True):
            variable.assign_sub(learning_rate * gradient)
        step.assign_add(1)
        return loss, accuracy

    @tf.function
    def train_step(iterator: Any) -> tuple[Any, Any]:
        images, labels = next(iterator)
        loss, accuracy = strategy.run(replica_step, args=(images, labels))
        mean = tf.distribute.ReduceOp.MEAN
        return strategy.reduce(mean, loss, axis=None), strategy.reduce(mean, accuracy, axis=None)

    return model, step, train_step


def single_process_strategy(args: argparse.Namespace) -> tf.distribute.Strategy:
    """The default strategy, or MirroredStrategy over the visible GPUs (else N logical CPUs)."""
    if args.strategy != "mirrored":
        return tf.distribute.get_strategy()
    # Physical devices only: listing logical ones initialises the runtime, after which the CPU
    # can no longer be split.
    if tf.config.list_physical_devices("GPU"):
        return tf.distribute.MirroredStrategy()  # every visible GPU
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_devices)
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)


def run_mirrored(args: argparse.Namespace, style: str) -> int:
    """Single process (default or Mirrored strategy) or MultiWorkerMirrored: one synchronous
    loop. Every worker keeps its own checkpoints (the owner's in ckpt/, the others' beside it),
    so after a restart of all workers each restores the same step."""
    owner, task = True, "single"
    if style == "multi_worker":
        strategy: tf.distribute.Strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = strategy.cluster_resolver
        has_chief = "chief" in resolver.cluster_spec().as_dict()
        owner = resolver.task_type == ("chief" if has_chief else "worker") and (
            resolver.task_id == 0)
        task = f"{resolver.task_type}:{resolver.task_id}"
    else:
        strategy = single_process_strategy(args)
        if args.strategy == "mirrored":
            style, task = "mirrored", f"mirrored over {strategy.num_replicas_in_sync} devices"
    train_dir = os.path.abspath(args.train_dir)
    # Every MultiWorkerMirrored worker must save (saving may run collectives): the owner's copy
    # is the result, the others' stay beside it (as the TensorFlow docs advise, not in the
    # owner's dir) and are what each restores from after a restart.
    ckpt_dir = os.path.join(train_dir, CHECKPOINT_SUBDIR if owner
                            else f"{CHECKPOINT_SUBDIR}-{task.replace(':', '')}")
    if owner:
        prepare_result_dir(train_dir)
    images, labels, _, _ = load_digits_split()
    model, step, train_step = build_tf2_training(strategy, args.learning_rate, images.shape[1])
    dataset = strategy.distribute_datasets_from_function(
        make_dataset_fn(images, labels, args.batch_size, shard=True))
    iterator = iter(dataset)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), ckpt_dir,
                                         max_to_keep=5, checkpoint_name=CHECKPOINT_NAME)
    first = resume(manager, step)
    writer = (tf.summary.create_file_writer(os.path.join(train_dir, "train")) if owner
              else tf.summary.create_noop_writer())
    print(f"{style} {task} training {args.steps} steps", flush=True)
    started, window, path = time.monotonic(), Window(), manager.latest_checkpoint
    for number in range(first, args.steps + 1):
        loss, accuracy = train_step(iterator)  # already reduced: reading them is local
        window.add(float(loss), float(accuracy))
        if due(number, args.log_every, args.steps):
            write_scalars(writer, number, window.close(number))
        if due(number, args.checkpoint_every, args.steps):
            path = manager.save(checkpoint_number=number)
    if owner:
        finish(train_dir, style, args.steps, window.last, time.monotonic() - started, path)
    return 0


RUN_MARK = "tfctl-run-id"
# Checkpoint reads and writes on this process's own CPU, not on the devices holding the
# variables (a ParameterServer job's ps hosts): the whole checkpoint lands on the chief's disk.
CHIEF_IO = tf.train.CheckpointOptions(
    experimental_io_device="/job:chief/replica:0/task:0/device:CPU:0")


def resume(manager: tf.train.CheckpointManager, step: tf.Variable,
           options: tf.train.CheckpointOptions | None = None) -> int:
    """Restore the latest checkpoint, if any; the first step number still to run.

    Under tfctl a restarted task resumes its own run's checkpoints, never an older run's left
    in the same folder (`TFCTL_RUN_ID`, kept beside them): a new run starts at step 1, as every
    worker of it does. Outside tfctl any checkpoint found is resumed."""
    run_id = os.environ.get("TFCTL_RUN_ID")
    mark = os.path.join(manager.directory, RUN_MARK)
    ours = run_id is None or _read(mark) == run_id
    if run_id is not None:
        os.makedirs(manager.directory, exist_ok=True)
        with open(mark, "w") as out:
            out.write(run_id)
    if manager.latest_checkpoint is None or not ours:
        return 1
    manager.checkpoint.restore(manager.latest_checkpoint, options=options)
    done = int(step.numpy())
    print(f"resumed from {manager.latest_checkpoint} at global step {done}", flush=True)
    return done + 1


def _read(path: str) -> str | None:
    try:
        with open(path) as stream:
            return stream.read().strip()
    except OSError:
        return None


def run_parameter_server(args: argparse.Namespace) -> int:
    """ParameterServerStrategy: ps/worker serve forever; the chief schedules every step."""
    # Failed RPCs go to the caller (the coordinator retries elsewhere), as the TF guide advises.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id,
                                      protocol=resolver.rpc_layer or "grpc", start=True)
        print(f"ps_strategy {resolver.task_type}:{resolver.task_id} serving", flush=True)
        server.join()
        return 0
    if resolver.task_type != "chief":
        print(f"error: task type {resolver.task_type!r} has no role in a ps job", file=sys.stderr)
        return 2
    # By default every ps writes its own shard of a checkpoint on its own host; all IO on the
    # chief's CPU (CHIEF_IO) writes it whole on the chief's disk: no shared filesystem needed.
    train_dir = os.path.abspath(args.train_dir)
    prepare_result_dir(train_dir)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    images, labels, _, _ = load_digits_split()
    model, step, train_step = build_tf2_training(strategy, args.learning_rate, images.shape[1])
    dataset_fn = make_dataset_fn(images, labels, args.batch_size, shard=False)

    @tf.function
    def per_worker_dataset_fn() -> Any:
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, step=step), os.path.join(train_dir, CHECKPOINT_SUBDIR),
        max_to_keep=5, checkpoint_name=CHECKPOINT_NAME)
    first = resume(manager, step, CHIEF_IO)
    writer = tf.summary.create_file_writer(os.path.join(train_dir, "train"))
    print(f"ps_strategy chief:0 training {args.steps} steps", flush=True)
    started, window, pending, path = time.monotonic(), Window(), [], manager.latest_checkpoint
    for number in range(first, args.steps + 1):
        pending.append(coordinator.schedule(train_step, args=(iterator,)))
        if due(number, args.log_every, args.steps):
            coordinator.join()  # every scheduled step done: the global step is `number`
            for remote in pending:
                window.add(*(float(value) for value in remote.fetch()))
            pending = []
            write_scalars(writer, number, window.close(number))
        if due(number, args.checkpoint_every, args.steps):
            coordinator.join()
            path = manager.save(checkpoint_number=number, options=CHIEF_IO)
    finish(train_dir, "ps_strategy", args.steps, window.last, time.monotonic() - started, path)
    return 0


class SaveEveryHook(tf.compat.v1.train.SessionRunHook):
    """Saves every `every` global steps and at the end. Replaces the stock saver hook, which
    also writes graph events (a stray TensorBoard run) and a .meta file into the ckpt dir."""

    def __init__(self, saver: Any, prefix: str, global_step: Any, every: int) -> None:
        self.saver, self.prefix, self.global_step, self.every = saver, prefix, global_step, every
        self.next_step, self.path, self.saved_step = every, None, 0

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self.global_step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_values.results >= self.next_step:
            self.save(run_context.session, run_values.results)

    def end(self, session: Any) -> None:
        self.save(session, session.run(self.global_step))

    def save(self, session: Any, step: int) -> None:
        self.path = self.saver.save(session, self.prefix, global_step=step,
                                    write_meta_graph=False)
        self.next_step, self.saved_step = (step // self.every + 1) * self.every, int(step)


class PollingWorkerSessionCreator(tf.compat.v1.train.SessionCreator):
    """WorkerSessionCreator with a short poll: the stock one waits 30 s between looks at the
    chief (SessionManager's recovery_wait_secs), which dominates a short job."""

    def __init__(self, scaffold: Any, master: str, config: Any) -> None:
        self.scaffold, self.master, self.config = scaffold, master, config

    def create_session(self) -> Any:
        self.scaffold.finalize()
        manager = tf.compat.v1.train.SessionManager(
            local_init_op=self.scaffold.local_init_op, ready_op=self.scaffold.ready_op,
            ready_for_local_init_op=self.scaffold.ready_for_local_init_op,
            graph=tf.compat.v1.get_default_graph(), recovery_wait_secs=WORKER_POLL_SECS)
        return manager.wait_for_session(self.master, config=self.config, max_wait_secs=30 * 60)


def run_between_graph(args: argparse.Namespace) -> int:
    """Classic flags style: async between-graph replication with tf.compat.v1."""
    tf.compat.v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","),
                                    "worker": args.worker_hosts.split(",")})
    server = tf.compat.v1.train.Server(cluster, job_name=args.job_name,
                                       task_index=args.task_index)
    if args.job_name == "ps":
        print(f"flags ps:{args.task_index} serving", flush=True)
        server.join()
        return 0
    is_chief, train_dir = args.task_index == 0, os.path.abspath(args.train_dir)
    if is_chief:
        prepare_result_dir(train_dir)
    images, labels, _, _ = load_digits_split()
    worker_device = f"/job:worker/task:{args.task_index}"
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            worker_device=worker_device, cluster=cluster)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        model = DigitsMLP(images.shape[1])
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).shard(
            cluster.num_tasks("worker"), args.task_index)
        dataset = dataset.shuffle(len(labels)).repeat().batch(args.batch_size, True)
        batch_images, batch_labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        loss, accuracy = loss_and_accuracy(model(batch_images), batch_labels)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(args.learning_rate).minimize(
            loss, global_step=global_step, var_list=list(model.params().values()))
        with tf.control_dependencies([train_op]):
            step_after = tf.identity(global_step.read_value())
        tf.compat.v1.summary.scalar("loss", loss)
        tf.compat.v1.summary.scalar("accuracy", accuracy)
    with tf.compat.v1.device(worker_device):  # a plain Saver writes on the chief's own disk
        keys = {variable_key(name): var for name, var in model.params().items()}
        saver = tf.compat.v1.train.Saver({**keys, STEP_KEY: global_step}, max_to_keep=5)
    scaffold = tf.compat.v1.train.Scaffold(saver=saver)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", worker_device])
    hooks: list[Any] = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    if is_chief:
        ckpt_dir = os.path.join(train_dir, CHECKPOINT_SUBDIR)
        saving = SaveEveryHook(saver, os.path.join(ckpt_dir, CHECKPOINT_NAME), global_step,
                               args.checkpoint_every)
        hooks += [saving, tf.compat.v1.train.SummarySaverHook(
            save_steps=args.log_every, output_dir=os.path.join(train_dir, "train"),
            summary_op=tf.compat.v1.summary.merge_all())]
        creator: Any = tf.compat.v1.train.ChiefSessionCreator(
            scaffold, server.target, config, checkpoint_dir=ckpt_dir)
    else:
        creator = PollingWorkerSessionCreator(scaffold, server.target, config)
    print(f"flags worker:{args.task_index} training to global step {args.steps}", flush=True)
    started, window, step = time.monotonic(), Window(), 0
    with tf.compat.v1.train.MonitoredSession(creator, hooks, STOP_GRACE_SECS) as session:
        while not session.should_stop():  # log whenever the global step passes a multiple
            _, step, batch_loss, batch_accuracy = session.run(
                [train_op, step_after, loss, accuracy])
            window.add(float(batch_loss), float(batch_accuracy))
            if step // args.log_every > window.first_step // args.log_every:
                window.close(int(step))
    if window.steps:
        window.close(int(step))
    if is_chief:  # the final checkpoint's step: other workers may have moved past `step`
        finish(train_dir, "flags", saving.saved_step, window.last, time.monotonic() - started,
               saving.path)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.job_name or args.ps_hosts or args.worker_hosts:
        return run_between_graph(args)
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
    if cluster.get("ps"):
        return run_parameter_server(args)
    return run_mirrored(args, "multi_worker" if cluster else "single")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_dir", default="out",
                        help="checkpoints (ckpt/), summaries (train/), DONE; relative to cwd")
    parser.add_argument("--steps", type=int, default=200, help="optimizer updates in all")
    parser.add_argument("--batch_size", type=int, default=32, help="examples per worker step")
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--log_every", type=int, default=20, help="steps between log lines")
    parser.add_argument("--checkpoint_every", type=int, default=100,
                        help="steps between checkpoints (the last step is always saved)")
    parser.add_argument("--ps_hosts", default="", help="classic flags style: h:p,h:p")
    parser.add_argument("--worker_hosts", default="", help="classic flags style: h:p,h:p")
    parser.add_argument("--job_name", default="", choices=["", "ps", "worker"])
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--strategy", default="auto", choices=["auto", "mirrored"],
                        help="without a cluster: mirrored = MirroredStrategy over all GPUs")
    parser.add_argument("--cpu_devices", type=int, default=2,
                        help="--strategy mirrored on a machine without GPUs: logical CPUs")
    args = parser.parse_args(argv)
    if (args.job_name or args.ps_hosts or args.worker_hosts) and not (
            args.job_name and args.ps_hosts and args.worker_hosts):
        parser.error("the flags style needs --job_name, --ps_hosts and --worker_hosts together")
    for name in ("steps", "batch_size", "log_every", "checkpoint_every", "cpu_devices"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(main())
