// customops::my_add: 2 * a + b, element-wise (csrc/kernels/my_add.h).
#include "../kernels/my_add.h"

#include "binding.h"

namespace customops {

// Device, dtype, then (sizes being concrete) shapes; the output's shape, or
// nothing for symbolic sizes.  The op runs it, and so does its fake kernel
// (customops/ops.py) through customops._C.
std::optional<Shape> my_add_fake_check(const at::Tensor& a, const at::Tensor& b) {
  check_tensor(a, "my_add", "a", kFloatTypes);
  check_tensor(b, "my_add", "b", kFloatTypes);
  check_same_dtype(b, "my_add", "b", "a", a.scalar_type());
  if (!all_concrete(a, b)) return std::nullopt;
  checked([&] { my_add_check(shape_of(a), shape_of(b)); });
  return shape_of(a);
}

namespace {

template <typename T>
void my_add_as(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  my_add(data_of<T>(a), data_of<T>(b), a.numel(), data_of<T>(out), torch_parallel_for);
}

}  // namespace

// Any layout is accepted, as torchvision's ops do: validated first, then
// made contiguous (a copy only when it is not).  Also the pybind11 my_add.
at::Tensor my_add_op(const at::Tensor& a, const at::Tensor& b) {
  my_add_fake_check(a, b);
  const at::Tensor a_dense = a.contiguous(), b_dense = b.contiguous();
  at::Tensor out = at::empty_like(a_dense);
  switch (a.scalar_type()) {
    case at::kDouble: my_add_as<double>(a_dense, b_dense, out); break;
    case at::kHalf: my_add_as<Half>(a_dense, b_dense, out); break;
    default: my_add_as<float>(a_dense, b_dense, out);
  }
  return out;
}

TORCH_LIBRARY_FRAGMENT(customops, m) { m.def("my_add(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL(customops, CPU, m) { m.impl("my_add", &my_add_op); }

}  // namespace customops
