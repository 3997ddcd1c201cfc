"""The numpy reference for my_ops::scaled_row_sum, sharing no code with the
kernel: tests compare every route against it.  Needs only numpy."""

import numpy as np

EXPORTED_SCALE = 0.5  # the attribute export.py writes into the models


def reference(x, weight=None, scale=1.0):
    terms = np.asarray(x, np.float32) * (1 if weight is None else np.asarray(weight, np.float32))
    total = np.float32(scale) * terms.astype(np.float64).sum(axis=1)
    return total.astype(np.float32), terms.argmax(axis=1)  # argmax: the first of equal terms


def exported_model(x, weight=None):
    """What the exported models compute: inputs by the models' input names."""
    return reference(x, weight, EXPORTED_SCALE)
