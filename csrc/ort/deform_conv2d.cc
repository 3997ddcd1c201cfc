// custom::deform_conv2d on ONNX Runtime's CPU provider.
#include "ops.h"
#include "../kernels/deform_conv2d.h"

namespace customops::ort {
namespace {

constexpr auto kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

struct DeformConv2d {
  static constexpr const char* kName = "deform_conv2d";
  // input, weight, offset, mask (optional), bias (optional): torchvision's order
  static constexpr IoSpec kInputs[] = {
      {kFloat, false}, {kFloat, false}, {kFloat, false}, {kFloat, true}, {kFloat, true}};
  static constexpr IoSpec kOutputs[] = {{kFloat, false}};

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
        deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset), shape_of(mask),
                            shape_of(bias), stride, padding, dilation, groups, offset_groups);
    auto output = context.GetOutput(0, {p.batch, p.out_channels, p.out_h, p.out_w});
    deform_conv2d(input.GetTensorData<float>(), weight.GetTensorData<float>(),
                  offset.GetTensorData<float>(), mask ? mask->GetTensorData<float>() : nullptr,
                  bias ? bias->GetTensorData<float>() : nullptr, p,
                  output.GetTensorMutableData<float>(), parallel_for_of(context));
  }

  // (N, O, oh, ow): N from input, O from weight, (oh, ow) from offset.
  static void infer_shapes(const ShapeInference& shapes) {
    const auto input = shapes.input(0), weight = shapes.input(1), offset = shapes.input(2);
    Dims dims(4);
    if (input && input->size() == 4) dims[0] = (*input)[0];
    if (weight && weight->size() == 4) dims[1] = (*weight)[0];
    if (offset && offset->size() == 4) dims[2] = (*offset)[2], dims[3] = (*offset)[3];
    shapes.set_output(0, kFloat, dims);
  }
};

}  // namespace

OrtCustomOp* deform_conv2d_op() {
  static ClassicOp<DeformConv2d> op;
  return &op;
}

}  // namespace customops::ort
