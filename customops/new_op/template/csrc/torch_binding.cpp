// my_ops::scaled_row_sum as a PyTorch operator: schema and CPU kernel, nothing
// else.  No PYBIND11_MODULE: Python loads the library with
// torch.ops.load_library and calls torch.ops.my_ops.scaled_row_sum.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>

#include "scaled_row_sum.h"

namespace {

std::tuple<at::Tensor, at::Tensor> scaled_row_sum_cpu(const at::Tensor& x,
                                                      const std::optional<at::Tensor>& weight,
                                                      double scale) {
  // Layout and dtype first, before any pointer is read; each names the argument.
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat,
              "scaled_row_sum: x must be float32 of shape (rows, cols), got ", x.scalar_type(),
              " of shape ", x.sizes());
  TORCH_CHECK(!weight || (weight->dim() == 1 && weight->scalar_type() == at::kFloat),
              "scaled_row_sum: weight must be float32 of shape (cols,), got ", weight->scalar_type(),
              " of shape ", weight->sizes());
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight ? weight->contiguous() : at::Tensor();
  try {  // the kernel's own checks, as a ValueError in Python
    check_scaled_row_sum(x.size(1), weight.has_value(), weight ? weight->numel() : 0, scale);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  at::Tensor sum = at::empty({x.size(0)}, x.options());
  at::Tensor argmax = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  scaled_row_sum(xc.data_ptr<float>(), x.size(0), x.size(1), weight ? wc.data_ptr<float>() : nullptr,
                 static_cast<float>(scale), sum.data_ptr<float>(), argmax.data_ptr<int64_t>());
  return {sum, argmax};
}

}  // namespace

// "float scale": a Python int given as scale arrives as a float, so the
// exported attribute is always a FLOAT.  "Tensor?": weight may be None.
TORCH_LIBRARY(my_ops, m) {
  m.def("scaled_row_sum(Tensor x, Tensor? weight, float scale) -> (Tensor sum, Tensor argmax)");
}

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("scaled_row_sum", scaled_row_sum_cpu);
}
