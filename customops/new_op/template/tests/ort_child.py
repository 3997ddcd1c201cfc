"""Runs a model with the op's library for tests/conftest.py:run_ort, in a
process of its own so that a crash is that process's alone.

    ort_child.py MODEL LIBRARY DIR THREADS ROUNDS INTRA_OP_THREADS

Reads DIR/in<i>.npz; the session's pool has INTRA_OP_THREADS threads (0: ORT's
default).  THREADS 0: runs in0 once and writes DIR/out0.npz.  THREADS N: runs
every input once alone, then THREADS threads run them all again ROUNDS times at
once, on one session, each thread starting at another input; exits 3 naming
the first input whose concurrent outputs differ from its lone run.  Errors: the
last stderr line is "session: ..." or "run: ..."."""

import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

model, library, directory, threads, rounds, intra_op_threads = (sys.argv[1], sys.argv[2], Path(sys.argv[3]),
                                                                *map(int, sys.argv[4:]))
feeds = []
for path in sorted(directory.glob("in*.npz"), key=lambda p: int(p.stem[2:])):
    with np.load(path) as arrays:
        feeds.append(dict(arrays))
try:
    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    options.intra_op_num_threads = intra_op_threads
    session = ort.InferenceSession(model, options)
except Exception as error:  # noqa: BLE001  (reported to the parent, by stage)
    sys.exit("session: " + str(error).replace("\n", " "))
try:
    alone = [session.run(None, feed) for feed in feeds]
except Exception as error:  # noqa: BLE001
    sys.exit("run: " + str(error).replace("\n", " "))
if not threads:
    np.savez(directory / "out0.npz", *alone[0])
    sys.exit(0)

mismatches = []


def work(start):
    for r in range(rounds):
        for k in range(len(feeds)):
            i = (start + r + k) % len(feeds)
            got = session.run(None, feeds[i])
            if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, alone[i])):
                mismatches.append(i)


workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
if mismatches:
    sys.exit(f"run: concurrent runs differ from lone runs on input {mismatches[0]} "
             f"({len(mismatches)} of {threads * rounds * len(feeds)} runs)")
print(f"{threads * rounds * len(feeds)} concurrent runs on {len(feeds)} inputs equal their lone runs")
