// torch.ops.geo.sq_dist on the LibTorch stable ABI: only torch/csrc/stable and
// torch/headeronly headers, so the binary calls libtorch through its stable C
// shim and loads in every torch release from the one TORCH_TARGET_VERSION names
// (setup.py: 2.10) on.  No at::Tensor, no pybind11.
#include <Python.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include "sq_dist.h"

namespace {

using torch::stable::Tensor;

Tensor sq_dist(const Tensor& a, const Tensor& b) {
  // STD_TORCH_CHECK throws std::runtime_error (c10::Error is not part of the stable ABI);
  // torch turns it into a RuntimeError carrying this message.
  STD_TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(0) && a.size(1) == b.size(1),
                  "geo::sq_dist: a and b must be (n, d) tensors of one shape");
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float &&
                      b.scalar_type() == torch::headeronly::ScalarType::Float && a.is_cpu() && b.is_cpu(),
                  "geo::sq_dist: a and b must be float32 CPU tensors");
  const Tensor ac = torch::stable::contiguous(a), bc = torch::stable::contiguous(b);
  Tensor out = torch::stable::new_empty(ac, {a.size(0)});
  const float* pa = ac.const_data_ptr<float>();
  const float* pb = bc.const_data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  const int64_t d = a.size(1);
  torch::stable::parallel_for(0, a.size(0), 2048, [=](int64_t begin, int64_t end) {
    geo::sq_dist(pa, pb, po, begin, end, d);
  });
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY(geo, m) { m.def("sq_dist(Tensor a, Tensor b) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(geo, CPU, m) { m.impl("sq_dist", TORCH_BOX(&sq_dist)); }

// `import geo._C` loads this file (and so runs the registrations above); the module
// itself is empty, made with Python's limited API so one abi3 file serves Python >= 3.10.
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
