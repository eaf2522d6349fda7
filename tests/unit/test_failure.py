"""remote/runs/failure.py: the lines that name a task's error, and the hint, from log tails."""

from __future__ import annotations

import pytest

from tfctl.remote.runs.failure import explain, is_error_line

SAVER_TAIL = """\
Traceback (most recent call last):
  File "/home/u/lab/train.py", line 120, in <module>
    main()
tensorflow.python.framework.errors_impl.NotFoundError: From /job:ps/replica:0/task:1:
out/train/model.ckpt-0_temp/part-00001-of-00003.data-00000-of-00001; No such file or directory
\t [[node save/SaveV2_1 (defined at /home/u/lab/train.py:88) ]]
Original stack trace for 'save/SaveV2_1':
  File "/home/u/lab/train.py", line 88, in main
    saver = tf.compat.v1.train.Saver()
  File "/usr/lib/python3/dist-packages/tensorflow/python/training/saver.py", line 946, in build
    self._build(self._filename, build_save=True, build_restore=True)
""".splitlines()


def test_checkpoint_shard_error_is_named_over_stack_frames() -> None:
    failure = explain(SAVER_TAIL, keep=3)
    assert any("NotFoundError" in line for line in failure.lines)
    assert not any(line.lstrip().startswith("File ") for line in failure.lines)
    assert failure.headline is not None and "NotFoundError" in failure.headline
    assert failure.hint is not None and "every ps and the chief see" in failure.hint


@pytest.mark.parametrize(("tail", "headline", "hint_words"), [
    (["step 10", "2026 W ResourceExhaustedError: OOM when allocating tensor with shape[128]"],
     "OOM when allocating", "batch size"),
    (["E0000 UNAVAILABLE: failed to connect to all addresses; last error: Connection refused"],
     "UNAVAILABLE", "check --firewall"),
    # gRPC's words when a name of the spec does not resolve (grpc/grpc#34709,
    # tensorflow/serving#1535): a name, not a firewall.
    (["E0000 UNAVAILABLE: DNS resolution failed for box2:2222: C-ares status is not "
      "ARES_SUCCESS qtype=A name=box2 is_balancer=0: Domain name not found"], "UNAVAILABLE",
     "`cluster_address:`"),
    (["\tstatus = StatusCode.UNAVAILABLE", '\tdetails = "DNS resolution failed"'], "UNAVAILABLE",
     "could not resolve a host name"),
    (["ValueError: Mismatched number of GPUs per worker"], "Mismatched", "same number of GPUs"),
    (["ModuleNotFoundError: No module named 'tensorflow'"], "ModuleNotFoundError",
     "not installed"),
    (["RuntimeError: my own bug"], "RuntimeError: my own bug", None),
    (["step 1", "step 2"], None, None),
])
def test_headline_and_hint(tail: list[str], headline: str | None,
                           hint_words: str | None) -> None:
    failure = explain(tail)
    if headline is None:
        assert failure.headline is None
    else:
        assert failure.headline is not None and headline in failure.headline
    if hint_words is None:
        assert failure.hint is None
    else:
        assert failure.hint is not None and hint_words in failure.hint


def test_keeps_log_order_and_plain_lines_before_frames() -> None:
    tail = ["loading data", 'File "x.py", line 3, in f', "    f()", "KeyError: 'lr'"]
    assert explain(tail, keep=2).lines == ("loading data", "KeyError: 'lr'")
    assert explain(tail, keep=10).lines == tuple(tail)


@pytest.mark.parametrize(("line", "error"), [
    ("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", True),
    ("SystemExit: 2", True), ("Killed", True), ("INFO step 5 loss 0.3", False),
    ('  File "a.py", line 1, in <module>', False), ("ErrorBoundary rendered", False),
])
def test_error_lines(line: str, error: bool) -> None:
    assert is_error_line(line) is error


def test_the_exception_wins_over_later_status_words_and_takes_its_next_line() -> None:
    tail = ["tensorflow.python.framework.errors_impl.NotFoundError: From /job:ps/task:1:",
            "out/train/model.ckpt-0_temp/part-00001; No such file or directory",
            "W0000 local_rendezvous.cc:412] Local rendezvous is aborting with status: ABORTED"]
    failure = explain(tail, keep=1)
    assert failure.headline == ("tensorflow.python.framework.errors_impl.NotFoundError: From "
                                "/job:ps/task:1: out/train/model.ckpt-0_temp/part-00001; No such "
                                "file or directory")
    assert failure.lines == tuple(tail[:2])  # the exception and the line its message goes on


def test_a_known_failure_wins_over_the_aborted_steps_that_follow_it() -> None:
    tail = ["step 1", "W0000 rendezvous aborting with status: NOT_FOUND: out/ckpt-0_temp; No "
            "such file or directory", "W0000 rendezvous aborting with status: ABORTED: Step 6 "
            "cancelled."]
    headline = explain(tail).headline
    assert headline is not None and "NOT_FOUND" in headline
    assert explain(tail[:1] + tail[2:]).headline == tail[2]  # nothing better: the consequence


def test_a_graph_execution_error_is_named_by_its_cause_below_the_node_frames() -> None:
    """TensorFlow 2's graph errors: `Graph execution error:`, a blank line, the node's frames,
    then the cause (tensorflow/python/framework/error_interpolation.py)."""
    tail = ["tensorflow.python.framework.errors_impl.NotFoundError: Graph execution error:", "",
            "Detected at node 'save/MergeV2Checkpoints' defined at (most recent call last):",
            '  File "/home/u/lab/train.py", line 40, in <module>',
            "Node: 'save/MergeV2Checkpoints'", "2 root error(s) found.",
            "  (0) NOT_FOUND: out/train/model.ckpt-10_temp/part-00001-of-00003.index; No such "
            "file or directory", "  (1) CANCELLED: Step was cancelled"]
    failure = explain(tail)
    assert failure.headline is not None
    assert failure.headline.startswith("tensorflow.python.framework.errors_impl.NotFoundError")
    assert "NOT_FOUND" in failure.headline and "No such file or directory" in failure.headline
    assert tail[6] in failure.lines
    assert failure.hint is not None and "every ps and the chief see" in failure.hint


# Keras 2 code run under Keras 3, each tail as TensorFlow 2.21 with Keras 3 prints it (recorded
# by running the line named in the comment; the MultiWorkerMirrored one on two local workers).
PER_REPLICA_TAIL = """\
Traceback (most recent call last):
  File "/tmp/k3/m.py", line 11, in <module>
    model.fit(ds,epochs=1,steps_per_epoch=3, verbose=0)
  File "/srv/venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/srv/venv/lib/python3.11/site-packages/tensorflow/python/framework/constant_op.py", line 108, in convert_to_eager_tensor
    return ops.EagerTensor(value, ctx.device_name, dtype)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: Attempt to convert a value (PerReplica:{
  0: <tf.Tensor: shape=(4, 4), dtype=float32, numpy=
array([[0., 0., 0., 0.],
       [0., 0., 0., 0.]], dtype=float32)>
}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.
""".splitlines()  # noqa: E501


@pytest.mark.parametrize(("tail", "headline"), [
    pytest.param(  # tf.keras.metrics.SparseCategoricalAccuracy().reset_states()
        ["Epoch 1, Loss: 0.42", "Traceback (most recent call last):",
         '  File "/home/u/lab/main.py", line 97, in <module>',
         "    train_accuracy.reset_states()",
         "AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'. "
         "Did you mean: 'reset_state'?"],
        "AttributeError: 'SparseCategoricalAccuracy'", id="metric-reset_states"),
    pytest.param(  # tf.keras.optimizers.legacy.Adam(0.01)
        ["ImportError: `keras.optimizers.legacy` is not supported in Keras 3. When using "
         "`tf.keras`, to continue using a `tf.keras.optimizers.legacy` optimizer, you can install "
         "the `tf_keras` package (Keras 2) and set the environment variable "
         "`TF_USE_LEGACY_KERAS=True` to configure TensorFlow to use `tf_keras` when accessing "
         "`tf.keras`."], "ImportError: `keras.optimizers.legacy`", id="optimizers.legacy"),
    pytest.param(  # tf.keras.optimizers.experimental.SGD(0.1)
        ["AttributeError: module 'keras.optimizers' has no attribute 'experimental'"],
        "AttributeError: module 'keras.optimizers'", id="optimizers.experimental"),
    pytest.param(  # tf.keras.utils.experimental.DatasetCreator (the ParameterServer tutorial)
        ["AttributeError: module 'keras.utils' has no attribute 'experimental'"],
        "AttributeError: module 'keras.utils'", id="utils.experimental"),
    pytest.param(  # tf.keras.optimizers.SGD(0.1).get_updates
        ["AttributeError: 'SGD' object has no attribute 'get_updates'"], "'SGD'",
        id="get_updates"),
    pytest.param(  # model.save("out/model") (a SavedModel directory in Keras 2)
        ["ValueError: Invalid filepath extension for saving. Please add either a `.keras` "
         "extension for the native Keras format (recommended) or a `.h5` extension. Use "
         "`model.export(filepath)` if you want to export a SavedModel for use with "
         "TFLite/TFServing/etc. Received: filepath=out/model."],
        "Invalid filepath extension", id="save-to-a-directory"),
    pytest.param(PER_REPLICA_TAIL, "ValueError: Attempt to convert a value (PerReplica:",
                 id="fit-under-multi-worker-mirrored"),
])
def test_keras_2_code_under_keras_3_is_told_to_set_keras_legacy(tail: list[str],
                                                                headline: str) -> None:
    failure = explain(tail)
    assert failure.headline is not None and headline in failure.headline
    assert failure.hint is not None
    assert "`job.keras: legacy`" in failure.hint and "tf-keras" in failure.hint
    assert "`job.setup`" in failure.hint


@pytest.mark.parametrize("line", [
    "AttributeError: 'Model' object has no attribute 'reset_metrics_now'",
    "AttributeError: module 'mylib.utils' has no attribute 'experimental'",
    "ValueError: Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) "
    "to a Tensor.",
])
def test_other_attribute_and_conversion_errors_get_no_keras_hint(line: str) -> None:
    hint = explain([line]).hint
    assert hint is None or "keras" not in hint
