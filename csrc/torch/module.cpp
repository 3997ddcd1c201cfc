// The Python module customops._C: loading it runs every op's registration
// (csrc/torch/<op>.cpp); it also holds the seeds' pybind11-style my_add and
// the checks that the fake kernels of customops/ops.py call, so that each
// check is written once, in C++.
#include "../kernels/cpu/simd.h"
#include "../kernels/profile.h"
#include "binding.h"

namespace customops {

at::Tensor my_add_op(const at::Tensor& a, const at::Tensor& b);
std::optional<Shape> my_add_fake_check(const at::Tensor& a, const at::Tensor& b);
std::optional<Shape> knn_query_fake_check(int64_t nsample, const at::Tensor& xyz,
                                          const at::Tensor& offset,
                                          const std::optional<at::Tensor>& new_xyz,
                                          const std::optional<at::Tensor>& new_offset);
std::optional<Shape> deform_conv2d_fake_check(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t offset_groups);
std::optional<Shape> deform_conv2d_backward_fake_check(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t offset_groups);
std::optional<Shape> ms_deform_attn_fake_check(const at::Tensor& value,
                                               const at::Tensor& spatial_shapes,
                                               const at::Tensor& level_start_index,
                                               const at::Tensor& sampling_locations,
                                               const at::Tensor& attention_weights,
                                               int64_t im2col_step);
std::optional<Shape> ms_deform_attn_backward_fake_check(
    const at::Tensor& grad, const at::Tensor& value, const at::Tensor& spatial_shapes,
    const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
    const at::Tensor& attention_weights, int64_t im2col_step);

}  // namespace customops

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // The seeds' style: a plain pybind11 function (customops._C.my_add).  It is
  // callable from Python but invisible to torch.export and to torch.library,
  // which is why the operator customops::my_add exists as well.
  m.def("my_add", &customops::my_add_op, "2 * a + b (pybind11 binding)");
  // Each returns the output's shape, or None when a size is symbolic.
  m.def("my_add_fake_check", &customops::my_add_fake_check);
  m.def("knn_query_fake_check", &customops::knn_query_fake_check);
  m.def("deform_conv2d_fake_check", &customops::deform_conv2d_fake_check);
  m.def("deform_conv2d_backward_fake_check", &customops::deform_conv2d_backward_fake_check);
  m.def("ms_deform_attn_fake_check", &customops::ms_deform_attn_fake_check);
  m.def("ms_deform_attn_backward_fake_check", &customops::ms_deform_attn_backward_fake_check);
  // The vector code the kernels chose on this CPU (the benchmark records it
  // beside each figure): "avx512", "avx2" or "baseline".
  // The kernels' phase timers (kernels/profile.h, bench/step_profile.py):
  // profile_start zeroes and turns them on; profile_stop turns them off and
  // returns (nanoseconds, calls, flops) per phase, in the order of Phase.
  m.def("profile_start", [] {
    customops::PhaseCounters& c = customops::phase_counters();
    for (int i = 0; i < static_cast<int>(customops::Phase::kCount); ++i)
      c.nanoseconds[i] = 0, c.calls[i] = 0, c.flops[i] = 0;
    c.on = true;
  });
  m.def("profile_stop", [] {
    customops::PhaseCounters& c = customops::phase_counters();
    c.on = false;
    std::vector<std::tuple<int64_t, int64_t, int64_t>> phases;
    for (int i = 0; i < static_cast<int>(customops::Phase::kCount); ++i)
      phases.emplace_back(c.nanoseconds[i].load(), c.calls[i].load(), c.flops[i].load());
    return phases;
  });
  m.def("vector_code", [] {
    switch (customops::selected_isa()) {
      case customops::Isa::kAvx512: return "avx512";
      case customops::Isa::kAvx2: return "avx2";
      default: return "baseline";
    }
  });
}
