"""One InferenceSession, many Python threads: the results do not change.

An inference server calls Run on one session from several request threads at
once (ORT allows it: Run is thread-safe).  The kernels must then keep no
state between calls and share no scratch memory between concurrent calls.
Each op's session is run from 8 threads at once, 200 runs per thread, each
thread with its own inputs, and every result must equal, bit for bit, what
the same session gave for those inputs when run alone.  The inputs are big
enough that the kernels also split their work over ORT's intra-op pool.
"""

import threading

import numpy as np
import onnxruntime
import pytest

from customops import check
from customops.ort import library_path, session
from helpers import feeds, single_node_model
from optable import OPS, knn_inputs

THREADS = 8
RUNS = 200

# every op, and each of its variants (deform_conv2d: also the node that skips
# the middle optional input)
CASES = [pytest.param(op, variant, id=f"{op.name}-{variant}")
         for op in OPS.values() for variant in range(len(op.large(np.random.default_rng(0), 0)))]


@pytest.mark.parametrize("op,variant", CASES)
def test_threads_share_one_session(op, variant):
    """customops.check's threads check, as a user runs it on their library."""
    rng = np.random.default_rng(7)
    samples = [op.large(rng, i)[variant] for i in range(THREADS)]
    model = single_node_model(op.onnx_name, samples[0].inputs, op.output_names, **samples[0].attrs)
    (record,) = check.run(model, [library_path()], [feeds(s.inputs) for s in samples],
                          checks=["threads"], threads=THREADS, calls=RUNS)
    assert record["ok"], record["detail"]
    assert record["detail"].startswith(
        f"{THREADS} threads sharing one session, each on its own copy of the samples (values "
        "shuffled), give the serial run's bits; in "), record["detail"]


def test_threads_share_one_single_threaded_session():
    """The same with intra_op_num_threads = 1 (kernels run on the caller's thread)."""
    rng = np.random.default_rng(8)
    inputs = [knn_inputs(rng, [300 + 40 * i, 500, 7 * i], [100, 200 + 10 * i, 5])
              for i in range(THREADS)]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    knn = OPS["knn_query"]
    sess = session(single_node_model(knn.onnx_name, inputs[0], knn.output_names, nsample=5),
                   sess_options=options)
    expected = [sess.run(None, feeds(x)) for x in inputs]
    results = [None] * THREADS

    def worker(i):
        results[i] = all(all(np.array_equal(g, e) for g, e in
                             zip(sess.run(None, feeds(inputs[i])), expected[i]))
                         for _ in range(RUNS // 4))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * THREADS
