"""python -m customops.new_op SCHEMA DIR [--dtypes ...] [--shapes ...] (see __init__.py)."""

import argparse
import sys

from . import NewOpError, generate


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage too: one line is the rule for our tools
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    parser = OneLineParser(
        prog="python -m customops.new_op",
        description="Write a standalone project for a new op from its schema: its C++ kernel, PyTorch and "
                    "ONNX Runtime bindings, exports, a C++ host and tests, built and tested by `make test`. "
                    "You write the math (csrc/NAME.h and reference.py).")
    parser.add_argument("op", metavar="SCHEMA",
                        help='the op\'s torch.library schema, e.g. "geo::radius_graph(Tensor pos, Tensor? batch, '
                             'float r, int max_num_neighbors=32) -> Tensor edge_index": the Tensor arguments '
                             "first, then the attributes, the arguments with a default last (a Tensor? may "
                             "default to None, no other Tensor has a default); NS::NAME alone gives "
                             "the template's op (my_ops::scaled_row_sum) under that name")
    parser.add_argument("directory", metavar="DIR", help="a new or empty directory")
    parser.add_argument("--dtypes", help="the floating types T stands for, e.g. float32,float64 (default float32)")
    parser.add_argument("--shapes", help='each tensor\'s element type and sizes, e.g. "pos: T[n,3]; batch: '
                                         'int64[n]; edge_index: int64[2,E]"; a name only outputs carry is a size '
                                         "only the data give; unlisted tensors are T with the first input's shape")
    args = parser.parse_args(argv)
    try:
        written = generate(args.op, args.directory, args.dtypes, args.shapes)
    except (NewOpError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files into {args.directory}; next: cd {args.directory} && make test")
    return 0


sys.exit(main())
