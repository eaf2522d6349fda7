"""A between-graph (flags style) trainer written the way the old tutorials teach it.

`MonitoredTrainingSession(checkpoint_dir=...)` with the default Scaffold saves *sharded*: one
SaveV2 per parameter server, each on that ps's own host, then a merge on one of them. With ps
on several hosts that share no filesystem the first save fails with NOT_FOUND. Used by
tests/testbed/test_checkpoints.py to show that tfctl warns before, and names the error after.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--ps_hosts", required=True)
parser.add_argument("--worker_hosts", required=True)
parser.add_argument("--job_name", required=True)
parser.add_argument("--task_index", type=int, required=True)
parser.add_argument("--logdir", default="out/train")
args = parser.parse_args()

tf.compat.v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","),
                                "worker": args.worker_hosts.split(",")})
server = tf.compat.v1.train.Server(cluster, job_name=args.job_name, task_index=args.task_index)
if args.job_name == "ps":
    server.join()
with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster)):
    step = tf.compat.v1.train.get_or_create_global_step()
    # Several variables, so replica_device_setter spreads them over every ps.
    weights = [tf.compat.v1.get_variable(f"w{i}", [4], initializer=tf.zeros_initializer())
               for i in range(4)]
    loss = tf.add_n([tf.reduce_sum(tf.square(w - 1.0)) for w in weights])
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
hooks = [tf.compat.v1.train.StopAtStepHook(last_step=50)]
with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=args.task_index == 0, checkpoint_dir=args.logdir,
        hooks=hooks, save_checkpoint_steps=10, stop_grace_period_secs=1) as session:
    while not session.should_stop():
        session.run(train)
print("trained", flush=True)
