// custom::deform_conv2d on ONNX Runtime's CPU provider, for float, double and
// float16 tensors: one kernel per type under the one op name, and ORT picks
// the kernel whose declared types match the node's (all inputs one type).
#include <vector>

#include "ops.h"
#include "../kernels/deform_conv2d.h"

namespace customops::ort {
namespace {

template <typename T>
struct DeformConv2d {
  static constexpr const char* kName = "deform_conv2d";
  static constexpr ONNXTensorElementDataType kType = kOnnxType<T>;
  // input, weight, offset, mask (optional), bias (optional): torchvision's order
  static constexpr IoSpec kInputs[] = {
      {kType, false}, {kType, false}, {kType, false}, {kType, true}, {kType, true}};
  static constexpr IoSpec kOutputs[] = {{kType, false}};

  Shape stride, padding, dilation;
  int64_t groups, offset_groups;

  explicit DeformConv2d(const Ort::ConstKernelInfo& info)
      : stride(ints_attribute(info, kName, "stride").value_or(Shape{1, 1})),
        padding(ints_attribute(info, kName, "padding").value_or(Shape{0, 0})),
        dilation(ints_attribute(info, kName, "dilation").value_or(Shape{1, 1})),
        groups(int_attribute(info, kName, "groups").value_or(1)),
        offset_groups(int_attribute(info, kName, "offset_groups").value_or(1)) {}

  void compute(Ort::KernelContext& context) const {
    const Ort::ConstValue input = context.GetInput(0), weight = context.GetInput(1),
                          offset = context.GetInput(2);
    const auto mask = optional_input(context, 3), bias = optional_input(context, 4);
    const DeformConv2dParams p =
        deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset),
                            shape_of(mask), shape_of(bias), stride, padding, dilation, groups,
                            offset_groups);
    auto output = context.GetOutput(0, {p.batch, p.out_channels, p.out_h, p.out_w});
    using Kernel = KernelElementT<T>;
    const auto data = [](const Ort::ConstValue& value) {
      return reinterpret_cast<const Kernel*>(value.GetTensorData<T>());
    };
    deform_conv2d(data(input), data(weight), data(offset), mask ? data(*mask) : nullptr,
                  bias ? data(*bias) : nullptr, p,
                  reinterpret_cast<Kernel*>(output.GetTensorMutableData<T>()),
                  parallel_for_of(context));
  }

  // (N, O, oh, ow): N from input, O from weight, (oh, ow) from offset; the
  // type of input (see ShapeInference::input_type).
  static void infer_shapes(const ShapeInference& shapes) {
    const auto input = shapes.input(0), weight = shapes.input(1), offset = shapes.input(2);
    Dims dims(4);
    if (input && input->size() == 4) dims[0] = (*input)[0];
    if (weight && weight->size() == 4) dims[1] = (*weight)[0];
    if (offset && offset->size() == 4) dims[2] = (*offset)[2], dims[3] = (*offset)[3];
    shapes.set_output(0, shapes.input_type(0), dims);
  }
};

}  // namespace

std::vector<OrtCustomOp*> deform_conv2d_ops() {
  static ClassicOp<DeformConv2d<float>> f32;
  static ClassicOp<DeformConv2d<double>> f64;
  static ClassicOp<DeformConv2d<Ort::Float16_t>> f16;
  return {&f32, &f64, &f16};
}

}  // namespace customops::ort
