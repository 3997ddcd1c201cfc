"""Runs the PyTorch op for tests/conftest.py:torch_op, started once per test
run.  Reads one request a line:

    call DIR      DIR/in.npz (an absent optional input: no key), DIR/attributes.json;
                  writes DIR/out.npz
    opcheck DIR   the same inputs through torch.library.opcheck

Each request runs in a forked process of its own, so a crash of the math (a
segfault, a division by zero) costs that process only; this one answers a
line: "ok", "error TYPE: MESSAGE" for the op's exception, or "crash SIGNAL"."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's modules
import op  # noqa: E402, F401  (loads the op)
from schema import INPUTS, NAME, NAMESPACE  # noqa: E402

OP = getattr(getattr(torch.ops, NAMESPACE), NAME)


def serve(request, directory):
    with np.load(directory / "in.npz") as arrays:
        tensors = [torch.from_numpy(arrays[name]) if name in arrays.files else None for name in INPUTS]
    attributes = json.loads((directory / "attributes.json").read_text())
    try:
        if request == "opcheck":
            torch.library.opcheck(OP.default, tuple(tensors), attributes)
        else:
            outputs = OP(*tensors, **attributes)
            np.savez(directory / "out.npz", *[t.numpy() for t in (outputs if isinstance(outputs, tuple) else (outputs,))])
        return "ok"
    except Exception as error:  # noqa: BLE001  (handed to the parent, which raises it)
        return f"error {type(error).__name__}: " + str(error).replace("\n", " ")


for line in sys.stdin:
    request, directory = line.split(maxsplit=1)
    directory = Path(directory.strip())
    if request == "opcheck":  # what opcheck imports, slow to import: once here, not in each fork
        import torch._dynamo  # noqa: F401
        import torch._functorch.aot_autograd  # noqa: F401
    pid = os.fork()
    if pid == 0:  # the op runs here only: this process never starts torch's thread pools
        (directory / "answer.txt").write_text(serve(request, directory))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    answer = directory / "answer.txt"
    print(f"crash {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) or not answer.exists() else answer.read_text(),
          flush=True)
