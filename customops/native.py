"""Capture what C++ code prints, which Python's own redirection cannot see.

The TorchScript exporter and ONNX Runtime write some messages straight to the
process's file descriptors 1 and 2: shape-inference warnings with
timestamps, and (torch 2.14's ONNX logging is always on after the first
export) the whole TorchScript graph of a failed export, with source paths.
In a notebook those land in the cell's output, so the stored output would
depend on the time and the machine.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def native_output():
    """Redirects file descriptors 1 and 2 into a buffer for the duration of
    the block; yields a list that holds the captured text afterwards."""
    captured: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))
