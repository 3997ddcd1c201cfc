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

from customops.ort import session
from helpers import feeds, random_clouds, single_node_model

THREADS = 8
RUNS = 200


def knn_inputs(rng, i):
    sizes = [300 + 40 * i, 500, 7 * i]  # one cloud may be empty
    xyz, offset = random_clouds(rng, sizes, duplicates=i % 2 == 1)
    new_xyz, new_offset = random_clouds(rng, [100, 200 + 10 * i, 5])
    return dict(xyz=xyz, offset=offset, new_xyz=new_xyz, new_offset=new_offset)


def my_add_inputs(rng, i):
    shape = (2 + i, 40_000)  # above the kernel's grain: split over the pool
    return dict(a=rng.standard_normal(shape, dtype=np.float32),
                b=rng.standard_normal(shape, dtype=np.float32))


def deform_inputs(rng, i, mask=True):
    n, c, h, w = 1 + i % 2, 8, 12 + i, 16  # 3x3, padding 1: output h x w
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    return dict(input=f32(n, c, h, w), weight=f32(8, 4, 3, 3),
                offset=2 * f32(n, 2 * 2 * 9, h, w),
                mask=rng.random((n, 2 * 9, h, w), dtype=np.float32) if mask else None,
                bias=f32(8))


DEFORM_ATTRS = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=2, offset_groups=2)

OPS = {
    "my_add": ("my_add", my_add_inputs, ["c"], {}),
    "knn_query": ("knnquery", knn_inputs, ["idx", "dist"], {"nsample": 12}),
    "deform_conv2d": ("deform_conv2d", deform_inputs, ["y"], DEFORM_ATTRS),
    # the node that skips a middle optional input (no mask, a bias)
    "deform_conv2d_nomask": ("deform_conv2d", lambda rng, i: deform_inputs(rng, i, mask=False),
                             ["y"], DEFORM_ATTRS),
}


@pytest.mark.parametrize("name", OPS)
def test_threads_share_one_session(name):
    op_type, make_inputs, outputs, attrs = OPS[name]
    rng = np.random.default_rng(7)
    inputs = [make_inputs(rng, i) for i in range(THREADS)]
    sess = session(single_node_model(op_type, inputs[0], outputs, **attrs))
    expected = [sess.run(None, feeds(x)) for x in inputs]  # one at a time

    barrier = threading.Barrier(THREADS)
    errors, mismatches = [], []

    def worker(i):
        try:
            barrier.wait()
            for run in range(RUNS):
                got = sess.run(None, feeds(inputs[i]))
                for g, e in zip(got, expected[i]):
                    if g.shape != e.shape or g.tobytes() != e.tobytes():
                        mismatches.append((i, run))
                        return
        except Exception as error:  # noqa: BLE001  (reported below)
            errors.append((i, repr(error)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not mismatches, f"results differ from the sequential run (thread, run): {mismatches}"


def test_threads_share_one_single_threaded_session():
    """The same with intra_op_num_threads = 1 (kernels run on the caller's thread)."""
    rng = np.random.default_rng(8)
    inputs = [knn_inputs(rng, i) for i in range(THREADS)]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    sess = session(single_node_model("knnquery", inputs[0], ["idx", "dist"], nsample=5),
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
