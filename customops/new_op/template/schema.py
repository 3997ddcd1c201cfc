"""my_ops::scaled_row_sum as data: the schema it was generated from, with the
element types and named sizes of --shapes.  export.py and the tests read it;
`python -m customops.new_op` wrote it (edit EXPORTED freely)."""

# <schema:schema>
NAMESPACE, NAME = "my_ops", "scaled_row_sum"
SCHEMA = "my_ops::scaled_row_sum(Tensor x, Tensor? weight, float scale) -> (Tensor sum, Tensor argmax)"
DTYPES = ["float32"]  # what T stands for
INPUTS = {"x": ("T", ["rows", "cols"]), "weight": ("T", ["cols"])}  # name: (element type, sizes)
OPTIONAL = ["weight"]
OUTPUTS = {"sum": ("T", ["rows"]), "argmax": ("int64", ["rows"])}
DATA_DEPENDENT = []  # sizes only the kernel computes
ATTRIBUTES = {"scale": "FLOAT"}  # ONNX types
EXPORTED = {"scale": 0.5}  # the attribute values export.py writes into the models
# </schema:schema>
