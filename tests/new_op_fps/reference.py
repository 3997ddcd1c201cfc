# The reference of pc::farthest_point_sample for tests/test_new_op.py: what a user writes into
# the generated reference.py (which imports numpy as np; math is added).
import math

import numpy as np


def reference(*, pos, batch=None, ratio, random_start=False):
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    pos = np.asarray(pos, np.float64)
    ids = np.zeros(len(pos), np.int64) if batch is None else np.asarray(batch)
    if len(ids) and (ids[0] < 0 or np.any(np.diff(ids) < 0)):
        raise ValueError("batch must be sorted non-negative ids")
    out = []
    for group in np.unique(ids):
        rows = np.flatnonzero(ids == group)
        pick = 7919 % len(rows) if random_start else 0
        dist = np.full(len(rows), np.inf)
        for _ in range(math.ceil(ratio * len(rows))):
            out.append(rows[pick])
            diff = pos[rows] - pos[rows[pick]]
            dist = np.minimum(dist, (diff[:, 0] ** 2 + diff[:, 1] ** 2) + diff[:, 2] ** 2)
            pick = int(np.argmax(dist))
    return np.array(out, np.int64)
