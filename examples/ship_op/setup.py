"""One wheel, two libraries: geo/_C.abi3.so (the torch op, stable ABI, Python's
limited API) and geo/libgeo_ort.so (the ORT op).  Build it with the torch you
develop with (`pip wheel --no-build-isolation .`); ORT_INCLUDE_DIR names the ORT
headers (e.g. $(python -m customops.headers))."""

import os

if not os.environ.get("ORT_INCLUDE_DIR"):  # before torch, whose import may warn
    raise SystemExit("setup.py: set ORT_INCLUDE_DIR to a directory holding onnxruntime_cxx_api.h, "
                     "e.g. ORT_INCLUDE_DIR=$(python -m customops.headers)")

from setuptools import Extension, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

# 0x020a000000000000: torch 2.10, the oldest release the op must load in.  Every
# stable header then offers only what 2.10's shim has.
TARGET = "-DTORCH_TARGET_VERSION=0x020a000000000000"
# Export only the entry points: -fvisibility=hidden hides our own functions, the
# version script also the C++ library's template code the headers instantiate.
HIDDEN = "-fvisibility=hidden"
# Error messages name csrc/<file>, not the directory the wheel was built in.
HERE = f"-fmacro-prefix-map={os.path.dirname(os.path.abspath(__file__))}/="


def exports(name):
    return [f"-Wl,--version-script=csrc/{name}.map"]


class Build(BuildExtension):
    def get_ext_filename(self, name):
        if name.endswith("libgeo_ort"):  # a plain shared library, not a Python module
            return name.replace(".", os.sep) + ".so"
        return super().get_ext_filename(name)


setup(
    ext_modules=[
        CppExtension("geo._C", ["csrc/torch_op.cpp"], py_limited_api=True,
                     extra_compile_args=["-O2", HIDDEN, HERE, TARGET, "-DPy_LIMITED_API=0x030a0000"],
                     extra_link_args=exports("torch_op")),
        Extension("geo.libgeo_ort", ["csrc/ort_op.cc"], language="c++",
                  include_dirs=[os.environ["ORT_INCLUDE_DIR"]],
                  extra_compile_args=["-O2", "-std=c++17", HIDDEN, HERE], extra_link_args=exports("ort_op")),
    ],
    cmdclass={"build_ext": Build},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
