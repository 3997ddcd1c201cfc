"""python -m customops.check MODEL --library LIB --inputs S.npz [...] (see __init__.py)"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..doctor.probe import printable


def main(argv=None) -> int:
    from . import CHECKS, CannotRun, run

    parser = argparse.ArgumentParser(
        prog="python -m customops.check",
        description="Check an ONNX Runtime custom-op library on a model and sample inputs: "
                    "reference, declared shapes, omitted/wrong/empty/non-finite inputs, other "
                    "attribute values, ids with gaps, grown inputs and float types, threads, "
                    "determinism, other runtimes, the library file.  Exit status 0 all pass, "
                    "1 a check fails, 2 the check cannot run, 3 a bug of the checker's own.")
    parser.add_argument("model", help="an .onnx model holding the custom node(s)")
    parser.add_argument("--library", action="append", required=True, metavar="LIB.so",
                        help="a custom-op library to register (repeatable)")
    parser.add_argument("--inputs", action="append", required=True, metavar="SAMPLE.npz",
                        help="arrays keyed by model input name; a missing key is an omitted "
                             "optional input (repeatable)")
    parser.add_argument("--reference", metavar="FILE.py:FUNCTION",
                        help="called with a sample's arrays as keywords, returns the expected "
                             "outputs in the model's order")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--threads", type=int, default=4, metavar="N",
                        help="threads sharing one session, each making 8 runs (default 4)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="seconds a case may run before it counts as a hang (default 60)")
    parser.add_argument("--budget", type=float, default=64, metavar="MIB",
                        help="MiB the inputs of one grown copy of a sample may take (default 64)")
    parser.add_argument("--failures", default="customops-check-failures", metavar="DIR",
                        help="where a failure found by exploring is written, shrunk, as a model "
                             "and an .npz that replay it (default ./customops-check-failures)")
    parser.add_argument("--check", action="append", choices=CHECKS, metavar="NAME",
                        help="run only this check (repeatable; default: all: "
                             f"{', '.join(CHECKS)})")
    parser.add_argument("--skip", action="append", choices=CHECKS, metavar="NAME", default=[],
                        help="leave this check out (repeatable), e.g. on another model of a library "
                             "checked already: larger (it runs every float type of the op), "
                             "runtimes, library")
    parser.add_argument("--runtime", action="append", metavar="PYTHON",
                        help="the python of another onnxruntime release's environment, for the "
                             "runtimes and library checks (repeatable; default: the onnxruntime venvs "
                             "cached by python -m customops.envs)")
    parser.add_argument("--json", action="store_true",
                        help='print {"ok": bool, "checks": [{"name", "ok", "detail"}]}')
    args = parser.parse_args(argv)
    wrong = (f"--threads must be at least 1, got {args.threads}" if args.threads < 1 else
             f"--timeout must be a positive number of seconds, got {args.timeout}"
             if not args.timeout > 0 else
             f"--budget must be a positive number of MiB, got {args.budget:g}"
             if not args.budget > 0 else
             "--skip leaves no check to run" if set(args.check or CHECKS) <= set(args.skip) else None)
    if wrong:
        print(f"customops.check: {wrong}", file=sys.stderr)
        return 2
    for python in args.runtime or []:
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            print(f"customops.check: --runtime {printable(python)}: not an executable python "
                  "(give an environment's bin/python, e.g. what "
                  "python -m customops.envs onnxruntime==1.24.4 prints)",
                  file=sys.stderr)
            return 2
    try:
        records = run(args.model, args.library, args.inputs, args.reference, rtol=args.rtol,
                      atol=args.atol, threads=args.threads, checks=[c for c in args.check or CHECKS if c not in args.skip],
                      runtimes_python=args.runtime, timeout=args.timeout,
                      budget=int(args.budget * 2**20), failures=args.failures)
    except CannotRun as error:
        print(f"customops.check: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001  a bug here: still one line, never a traceback
        print(f"customops.check: internal error on {printable(args.model)} "
              f"({type(error).__name__}: {error}); please report it with the model",
              file=sys.stderr)
        return 3
    ok = all(r["ok"] is not False for r in records)
    if args.json:
        print(json.dumps({"ok": ok, "checks": records}, indent=1))
    else:
        for r in records:
            word = {True: "PASS", False: "FAIL", None: "SKIP"}[r["ok"]]
            print(f"{word} {r['name']}: {r['detail']}")
    return 0 if ok else 1
