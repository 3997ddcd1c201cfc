// my_ops::scaled_row_sum as a PyTorch operator: schema and CPU kernel, nothing
// else.  No PYBIND11_MODULE: Python loads the library with
// torch.ops.load_library and calls torch.ops.my_ops.scaled_row_sum.
// The regions marked <schema:...> follow from the op's schema: regenerate
// them rather than edit them; the math is in scaled_row_sum.h.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <vector>

#include "parallel.h"
#include "scaled_row_sum.h"
#include "sizes.h"

namespace {

// The dtype the math computes in for T: float16 is computed in float.
template <typename T>
at::ScalarType math_type() {
  return std::is_same_v<T, double> ? at::kDouble : at::kFloat;
}

// Layout and dtype first, before any pointer is read; each names the argument.
void check_dtype(const char* op, const char* name, const at::Tensor& tensor,
                 std::initializer_list<at::ScalarType> allowed) {
  for (const at::ScalarType type : allowed)
    if (tensor.scalar_type() == type) return;
  std::string names;
  for (const at::ScalarType type : allowed) names += std::string(names.empty() ? "" : " or ") + c10::toString(type);
  TORCH_CHECK(false, op, ": ", name, " must be ", names, ", got ", tensor.scalar_type());
}

void check_dtype(const char* op, const char* name, const std::optional<at::Tensor>& tensor,
                 std::initializer_list<at::ScalarType> allowed) {
  if (tensor) check_dtype(op, name, *tensor, allowed);
}

// ONNX stores a FLOAT attribute as a float32, PyTorch passes a schema float as
// a double: rounded here, both runtimes give the math the same value (with the
// double 0.1, floor(0.5 / 0.1) is 5; with the float32 one, 4).
double as_onnx_float(double value) { return static_cast<float>(value); }

std::vector<double> as_onnx_floats(c10::ArrayRef<double> values) {
  std::vector<double> rounded;
  for (const double value : values) rounded.push_back(static_cast<float>(value));
  return rounded;
}

// The checks of sizes.h and the math's own, as a ValueError in Python.
template <typename F>
auto value_errors(F checks) {
  try {
    return checks();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

// The math's parallel_for (parallel.h) on torch's intra-op threads, which rethrow
// an exception of fn in the caller.
void torch_parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(begin, end, grain, fn);
}

// <schema:torch-kernel>
template <typename T>
std::tuple<at::Tensor, at::Tensor> scaled_row_sum_typed(const at::Tensor& x,
    const std::optional<at::Tensor>& weight, double scale, const Sizes& sizes) {
  const at::Tensor x_ = x.to(math_type<T>()).contiguous();
  const at::Tensor weight_ = weight ? weight->to(math_type<T>()).contiguous() : at::Tensor();
  const int64_t rows = sizes.at("rows");
  const int64_t cols = sizes.at("cols");
  at::Tensor sum = at::empty({rows}, x.options().dtype(math_type<T>()));
  at::Tensor argmax = at::empty({rows}, x.options().dtype(at::kLong));
  scaled_row_sum<T>(x_.data_ptr<T>(), weight_.defined() ? weight_.data_ptr<T>() : nullptr,
    as_onnx_float(scale), rows, cols, sum.data_ptr<T>(), argmax.data_ptr<int64_t>(), torch_parallel_for);
  return {sum.to(x.scalar_type()), argmax};
}

std::tuple<at::Tensor, at::Tensor> scaled_row_sum_cpu(const at::Tensor& x,
    const std::optional<at::Tensor>& weight, double scale) {
  check_dtype("scaled_row_sum", "x", x, {at::kFloat});
  check_dtype("scaled_row_sum", "weight", weight, {x.scalar_type()});
  return value_errors([&] {
    check_scaled_row_sum_attributes(as_onnx_float(scale));
    const Sizes sizes = scaled_row_sum_sizes(x.sizes().vec(),
        weight ? std::optional(weight->sizes().vec()) : std::nullopt);
    return scaled_row_sum_typed<float>(x, weight, scale, sizes);
  });
}
// </schema:torch-kernel>

}  // namespace

// "float scale": a Python int given as scale arrives as a float, so the
// exported attribute is always a FLOAT.  "Tensor?": an input may be None.
TORCH_LIBRARY(my_ops, m) {
  // <schema:torch-schema>
  m.def("scaled_row_sum(Tensor x, Tensor? weight, float scale) -> (Tensor sum, Tensor argmax)");
  // </schema:torch-schema>
}

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("scaled_row_sum", scaled_row_sum_cpu);
}
