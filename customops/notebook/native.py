"""Capture what C++ code prints, which Python's own redirection cannot see.

The TorchScript exporter and ONNX Runtime write some messages straight to the
process's file descriptors 1 and 2: shape-inference warnings with
timestamps, and (torch 2.14's legacy exporter switches ONNX logging on at
the start of every export) the whole TorchScript graph of an export that
fails in its ONNX conversion, with source paths.
In a notebook those land in the cell's output, so the stored output would
depend on the time and the machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile

_libc = ctypes.CDLL(None)
_depth = 0  # how many captures are active; an inner one hands its text outward


def _flush_all():
    sys.stdout.flush()
    sys.stderr.flush()
    _libc.fflush(None)  # C stdio buffers, which Python's flush does not reach


@contextlib.contextmanager
def native_output():
    """Redirects file descriptors 1 and 2 into a buffer for the duration of
    the block; yields a list that holds the captured text afterwards.  Blocks
    nest: an enclosing capture also receives what an inner one caught."""
    global _depth
    captured: list[str] = []
    _flush_all()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        _depth += 1
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            _flush_all()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            _depth -= 1
            sink.seek(0)
            data = sink.read()
            captured.append(data.decode(errors="replace"))
            if _depth and data:
                os.write(2, data)  # fd 2 is the enclosing capture's sink
