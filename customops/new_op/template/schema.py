"""my_ops::scaled_row_sum as data: the schema it was generated from, with the
element types and named sizes of --shapes.  export.py and the tests read it;
`python -m customops.new_op` wrote it (edit EXPORTED and VALUES freely)."""

# <schema:schema>
NAMESPACE, NAME = "my_ops", "scaled_row_sum"
SCHEMA = "my_ops::scaled_row_sum(Tensor x, Tensor? weight, float scale) -> (Tensor sum, Tensor argmax)"
DTYPES = ["float32"]  # what T stands for
INPUTS = {"x": ("T", ["rows", "cols"]), "weight": ("T", ["cols"])}  # name: (element type, sizes)
OPTIONAL = ["weight"]
GROUP_IDS = []  # `sorted` in --shapes
OUTPUTS = {"sum": ("T", ["rows"]), "argmax": ("int64", ["rows"])}
DATA_DEPENDENT = []  # sizes only the kernel computes
GROWN = ["cols"]  # the sizes the large samples grow
ATTRIBUTES = {"scale": "FLOAT"}  # ONNX types
EXPORTED = {"scale": 0.5}  # the attribute values export.py writes into the models
# The values the tests run each attribute at (the others at EXPORTED): add those your math
# treats apart (each `str` it accepts).  The reference raises ValueError for a value the math
# refuses; PyTorch and ORT (at session creation) must then refuse it too.
VALUES = {"scale": [0.5, 0.0, -0.5, float("inf"), float("nan")]}
# </schema:schema>

# The models export.py writes for each dtype and exporter: with every input, and
# without each optional input (the node then omits it).
WITHOUT = [""] + OPTIONAL


def model_file(dtype, route, without=""):
    """my_ops::scaled_row_sum's model file name (route "dynamo" or "legacy")."""
    return f"{NAME}_{dtype}{'_legacy' if route == 'legacy' else ''}{f'_without_{without}' if without else ''}.onnx"
