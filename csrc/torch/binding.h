// What every op's torch binding (csrc/torch/<op>.cpp) shares: tensors to the
// kernels' shapes and pointers, the device and dtype checks the pure kernels
// cannot do, and at::parallel_for as the kernels' ParallelFor.
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../kernels/half.h"
#include "../kernels/parallel.h"
#include "../kernels/shape.h"

namespace customops {

inline Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

inline OptionalShape shape_of(const std::optional<at::Tensor>& t) {
  return t ? OptionalShape(shape_of(*t)) : std::nullopt;
}

// False if any tensor is a fake traced with symbolic sizes (dynamic shapes),
// whose shapes only the fake kernel's output-shape formula can handle.  An
// absent optional counts as concrete.
inline bool concrete_sizes(const at::Tensor& t) {
  const c10::SymIntArrayRef sizes = t.sym_sizes();
  return std::all_of(sizes.begin(), sizes.end(),
                     [](const c10::SymInt& s) { return s.maybe_as_int().has_value(); });
}

inline bool concrete_sizes(const std::optional<at::Tensor>& t) { return !t || concrete_sizes(*t); }

template <typename... Tensors>
bool all_concrete(const Tensors&... tensors) {
  return (concrete_sizes(tensors) && ...);
}

// "Float", "Int or Long", "Float, Double or Half": c10's names, as torch prints them.
inline std::string dtype_names(std::initializer_list<at::ScalarType> dtypes) {
  std::ostringstream out;
  size_t i = 0;
  for (const at::ScalarType dtype : dtypes) {
    out << (i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") << dtype;
    ++i;
  }
  return out.str();
}

// my_add and deform_conv2d: float16 is computed in float32 and rounded once.
inline constexpr std::initializer_list<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble,
                                                                     at::kHalf};

// The tensor checks that the pure kernels cannot do: device and dtype.
inline void check_tensor(const at::Tensor& t, const char* op, const char* name,
                         std::initializer_list<at::ScalarType> dtypes) {
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) != dtypes.end(), op,
              ": ", name, " must be ", dtype_names(dtypes), ", got ", t.scalar_type());
}

// Inputs that must share the dtype of another: "b must have the dtype of a, Float, got Double".
inline void check_same_dtype(const at::Tensor& t, const char* op, const char* name,
                             const char* reference, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must have the dtype of ", reference,
              ", ", dtype, ", got ", t.scalar_type());
}

inline void torch_parallel_for(int64_t n, int64_t grain,
                               const std::function<void(int64_t, int64_t)>& body) {
  at::parallel_for(0, n, grain, body);
}

// Runs a kernel's argument check, reporting its message through TORCH_CHECK.
template <typename Check>
auto checked(Check&& check_fn) {
  try {
    return check_fn();
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, error.what());
  }
}

// The kernels' pointer type for a tensor's data; at::Half holds the same
// 16 bits as the kernels' Half.
template <typename T>
T* data_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, Half>) {
    static_assert(sizeof(at::Half) == sizeof(Half));
    return reinterpret_cast<Half*>(t.data_ptr<at::Half>());
  } else {
    return t.data_ptr<T>();
  }
}

}  // namespace customops
