"""Builds the two compiled parts of customops from csrc/.

* customops/_C*.so          the PyTorch extension (TORCH_LIBRARY ops + pybind11)
* customops/libcustomops_ort.so   the ONNX Runtime custom-op library; it links
  neither torch nor libonnxruntime and exports only RegisterCustomOps

Install with the venv's torch (no isolated build env):
    pip install --no-build-isolation -e .
"""

import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))
from customops import headers  # noqa: E402  (importing customops is torch-free)

TORCH_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc/torch").glob("*.cpp"))
KERNELS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc/kernels").glob("*.cpp"))
# Gradients are for training, in PyTorch; ONNX Runtime runs inference only.
INFERENCE_KERNELS = [k for k in KERNELS if not k.endswith("_backward.cpp")]
ORT_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc/ort").glob("*.cc"))
ORT_LIBRARY = "customops.libcustomops_ort"
FLAGS = ["-O3", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"]


class Build(BuildExtension):
    """BuildExtension that names the ORT library plainly (no Python ABI tag)
    and fetches the ORT headers only when that library is built."""

    def get_ext_filename(self, fullname):
        # Called with the full dotted name and with its last part alone.
        if fullname.split(".")[-1] == ORT_LIBRARY.split(".")[-1]:
            return str(Path(*fullname.split("."))) + ".so"
        return super().get_ext_filename(fullname)

    def build_extensions(self):
        for ext in self.extensions:
            if ext.name == ORT_LIBRARY:
                try:
                    ext.include_dirs.append(str(headers.include_dir()))
                except headers.HeadersNotFound as error:
                    sys.exit(f"error: {error}")
        super().build_extensions()


setup(
    name="customops",
    version="0.1.0",
    description="Custom PyTorch operators through ONNX into ONNX Runtime: a course",
    packages=find_packages(include=["customops", "customops.*"]),
    # The op project python -m customops.new_op copies (its folders hold no __init__.py).
    package_data={"customops.new_op": ["template/*", "template/.gitignore", "template/*/*"]},
    python_requires=">=3.10",
    ext_modules=[
        CppExtension(
            "customops._C",
            sources=[*TORCH_SOURCES, *KERNELS],
            # at::parallel_for is inline OpenMP: without -fopenmp it runs serially.
            extra_compile_args=[*FLAGS, "-fopenmp"],
            extra_link_args=["-fopenmp"],
        ),
        Extension(
            ORT_LIBRARY,
            sources=[*ORT_SOURCES, *INFERENCE_KERNELS],
            language="c++",
            extra_compile_args=["-std=c++17", *FLAGS],
            extra_link_args=[f"-Wl,--version-script={ROOT / 'csrc/ort/exports.lds'}"],
        ),
    ],
    cmdclass={"build_ext": Build},
    zip_safe=False,
)
