"""python -m customops.new_op NAMESPACE::NAME DIR (see __init__.py)."""

import argparse
import sys

from . import NewOpError, generate


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage too: one line is the rule for our tools
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    parser = OneLineParser(
        prog="python -m customops.new_op",
        description="Write a standalone project for a new op: its C++ kernel, PyTorch and ONNX "
                    "Runtime bindings, exports, a C++ host and tests, built and tested by `make test`.")
    parser.add_argument("op", metavar="NAMESPACE::NAME", help="the op's name, e.g. my_ops::scaled_row_sum")
    parser.add_argument("directory", metavar="DIR", help="a new or empty directory")
    args = parser.parse_args(argv)
    try:
        written = generate(args.op, args.directory)
    except (NewOpError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files into {args.directory}; next: cd {args.directory} && make test")
    return 0


sys.exit(main())
