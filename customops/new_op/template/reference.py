"""The numpy reference for my_ops::scaled_row_sum, sharing no code with the
kernel: the tests compare every route against it.  Needs only numpy."""

import numpy as np

from schema import EXPORTED


# <schema:reference>
def reference(x, weight=None, scale=1.0):
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    terms = np.asarray(x) * (1 if weight is None else np.asarray(weight))
    total = scale * terms.astype(np.float64).sum(axis=1)
    return total.astype(np.asarray(x).dtype), terms.argmax(axis=1)  # argmax: the first of equal terms
# </schema:reference>


def exported_model(**inputs):
    """What the exported models compute: inputs by the models' input names.  The
    attributes are the exported values, unless the caller passes the node's own
    (customops.check does, and varies them)."""
    return reference(**{**EXPORTED, **inputs})
