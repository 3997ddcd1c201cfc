// custom::ms_deform_attn on ONNX Runtime's CPU provider, for float, double
// and float16 value, sampling_locations and attention_weights (one type per
// node; spatial_shapes and level_start_index are int64): one kernel per
// type under the one op name, and ORT picks the kernel whose declared types
// match the node's.
#include <vector>

#include "ops.h"
#include "../kernels/ms_deform_attn.h"

namespace customops::ort {
namespace {

constexpr auto kInt64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;

template <typename T>
struct MsDeformAttn {
  static constexpr const char* kName = "ms_deform_attn";
  static constexpr ONNXTensorElementDataType kType = kOnnxType<T>;
  // value, spatial_shapes, level_start_index, sampling_locations, attention_weights
  static constexpr IoSpec kInputs[] = {
      {kType, false}, {kInt64, false}, {kInt64, false}, {kType, false}, {kType, false}};
  static constexpr IoSpec kOutputs[] = {{kType, false}};

  // Validated on every run, as in PyTorch; it changes nothing (see the kernel).
  int64_t im2col_step;

  explicit MsDeformAttn(const Ort::ConstKernelInfo& info)
      : im2col_step(int_attribute(info, "ms_deform_attn", "im2col_step").value_or(64)) {}

  void compute(Ort::KernelContext& context) const {
    const Ort::ConstValue value = context.GetInput(0), spatial_shapes = context.GetInput(1),
                          level_start_index = context.GetInput(2),
                          locations = context.GetInput(3), weights = context.GetInput(4);
    const MsDeformAttnParams p = ms_deform_attn_check(
        shape_of(value), shape_of(spatial_shapes), shape_of(level_start_index),
        shape_of(locations), shape_of(weights), im2col_step,
        spatial_shapes.GetTensorData<int64_t>(), level_start_index.GetTensorData<int64_t>());
    auto output = context.GetOutput(0, {p.batch, p.queries, p.heads * p.channels});
    using Kernel = KernelElementT<T>;
    const auto data = [](const Ort::ConstValue& v) {
      return reinterpret_cast<const Kernel*>(v.GetTensorData<T>());
    };
    ms_deform_attn(data(value), spatial_shapes.GetTensorData<int64_t>(),
                   level_start_index.GetTensorData<int64_t>(), data(locations), data(weights),
                   p, reinterpret_cast<Kernel*>(output.GetTensorMutableData<T>()),
                   parallel_for_of(context));
  }

  // (N, Q, M * D): N from value (or sampling_locations), Q from
  // sampling_locations, each keeping its symbol; M * D when both are
  // numbers.  The type of value (see ShapeInference::input_type).
  static void infer_shapes(const ShapeInference& shapes) {
    const auto value = shapes.input(0), locations = shapes.input(3);
    Dims dims(3);
    if (locations && locations->size() == 6) dims[0] = (*locations)[0], dims[1] = (*locations)[1];
    if (value && value->size() == 4) {
      const Dim &n = (*value)[0], &m = (*value)[2], &d = (*value)[3];
      if (n.value >= 0 || !n.symbol.empty()) dims[0] = n;
      if (m.value >= 0 && d.value >= 0) dims[2].value = m.value * d.value;
    }
    shapes.set_output(0, shapes.input_type(0), dims);
  }
};

}  // namespace

std::vector<OrtCustomOp*> ms_deform_attn_ops() {
  static ClassicOp<MsDeformAttn<float>> f32;
  static ClassicOp<MsDeformAttn<double>> f64;
  static ClassicOp<MsDeformAttn<Ort::Float16_t>> f16;
  return {&f32, &f64, &f16};
}

}  // namespace customops::ort
