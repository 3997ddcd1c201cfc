"""python -m customops.doctor MODEL [--library PATH]... [--json]"""

from __future__ import annotations

import argparse
import sys

from . import probe
from .diagnosis import ModelReadError, diagnose


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m customops.doctor",
        description="Explain why an ONNX model will not load or run in the installed "
                    "onnxruntime, and how to fix it.")
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--library", action="append", default=[], metavar="PATH",
                        help="a custom-op library to register, as the deployment would "
                             "(repeatable)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    try:
        diagnosis = diagnose(args.model, args.library)
    except ModelReadError as error:
        print(f"customops.doctor: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001  a bug here: still one line, never a traceback
        said = (str(error).splitlines() or [""])[0]  # pybind11's TypeErrors span lines
        print(f"customops.doctor: internal error on {probe.printable(args.model)} "
              f"({type(error).__name__}: {said}); please report it with the model",
              file=sys.stderr)
        return 3
    print(diagnosis.to_json() if args.json else diagnosis)
    return diagnosis.exit_status
