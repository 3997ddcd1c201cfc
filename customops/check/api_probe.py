"""Which OrtApi version a custom-op library asks for (a standalone script).

    python api_probe.py LIBRARY.so

Calls the library's RegisterCustomOps with an OrtApiBase whose GetApi
records each version asked for and then answers as the runtime's own; the
session options are real ones, made by the runtime's C API.  Prints one JSON
line: the runtime's version, the versions asked for, and the status message
RegisterCustomOps returned (null on success).  Imports only the standard
library and finds the runtime's libonnxruntime.so through the installed
onnxruntime package, so the venvs of other releases run it too.

A library that does not ask through the OrtApiBase it is given (one that
calls OrtGetApiBase itself, linked against libonnxruntime) asks nothing here.
"""

import ctypes
import importlib.util
import json
import pathlib
import sys

GET_API = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
VERSION = ctypes.CFUNCTYPE(ctypes.c_char_p)
# OrtApi is a table of function pointers, only ever appended to: CreateSessionOptions
# is entry 10 and GetErrorMessage entry 2 in every release (onnxruntime_c_api.h).
CREATE_SESSION_OPTIONS, GET_ERROR_MESSAGE = 10, 2


class ApiBase(ctypes.Structure):
    _fields_ = [("GetApi", GET_API), ("GetVersionString", VERSION)]


def main():
    package = pathlib.Path(importlib.util.find_spec("onnxruntime").origin).parent
    runtime = ctypes.CDLL(str(next(package.glob("capi/libonnxruntime.so*"))))
    runtime.OrtGetApiBase.restype = ctypes.POINTER(ApiBase)
    real = runtime.OrtGetApiBase().contents
    version = real.GetVersionString().decode()
    asked = []

    def get_api(wanted):
        asked.append(wanted)
        return real.GetApi(wanted)

    base = ApiBase(GET_API(get_api), real.GetVersionString)
    api = ctypes.cast(real.GetApi(int(version.split(".")[1])), ctypes.POINTER(ctypes.c_void_p))
    create = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))(
        api[CREATE_SESSION_OPTIONS])
    options = ctypes.c_void_p()
    assert not create(ctypes.byref(options)), "CreateSessionOptions failed"
    register = ctypes.CDLL(sys.argv[1]).RegisterCustomOps
    register.restype = ctypes.c_void_p
    register.argtypes = [ctypes.c_void_p, ctypes.POINTER(ApiBase)]
    status = register(options, ctypes.byref(base))
    message = None
    if status:
        text = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(api[GET_ERROR_MESSAGE])
        message = text(status).decode(errors="replace")
    print(json.dumps({"runtime": version, "asked": asked, "status": message}))


if __name__ == "__main__":
    main()
