// custom::knnquery on ONNX Runtime's CPU provider.
#include "ops.h"
#include "../kernels/knn_query.h"

namespace customops::ort {
namespace {

constexpr auto kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto kInt32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;

struct KnnQuery {
  static constexpr const char* kName = "knnquery";
  // xyz, offset, new_xyz (optional), new_offset (optional)
  static constexpr IoSpec kInputs[] = {
      {kFloat, false}, {kInt32, false}, {kFloat, true}, {kInt32, true}};
  // idx, dist
  static constexpr IoSpec kOutputs[] = {{kInt32, false}, {kFloat, false}};

  int64_t nsample;

  // A missing nsample fails at session creation; a bad value (0, 10^9)
  // fails each run with the same message as in PyTorch.
  explicit KnnQuery(const Ort::ConstKernelInfo& info) {
    const auto value = int_attribute(info, "knn_query", "nsample");
    check(value.has_value(), "knn_query", "attribute nsample (int) is required");
    nsample = *value;
  }

  void compute(Ort::KernelContext& context) const {
    const Ort::ConstValue xyz = context.GetInput(0), offset = context.GetInput(1);
    const auto new_xyz = optional_input(context, 2), new_offset = optional_input(context, 3);
    const Shape xyz_shape = shape_of(xyz), offset_shape = shape_of(offset);
    const OptionalShape new_xyz_shape = shape_of(new_xyz);
    knn_query_check(xyz_shape, offset_shape, offset.GetTensorData<int32_t>(), new_xyz_shape,
                    shape_of(new_offset),
                    new_offset ? new_offset->GetTensorData<int32_t>() : nullptr, nsample);

    const Ort::ConstValue& queries = new_xyz ? *new_xyz : xyz;
    const Ort::ConstValue& query_offset = new_offset ? *new_offset : offset;
    const int64_t m = new_xyz ? (*new_xyz_shape)[0] : xyz_shape[0];
    auto idx = context.GetOutput(0, {m, nsample});
    auto dist = context.GetOutput(1, {m, nsample});
    knn_query(xyz.GetTensorData<float>(), offset.GetTensorData<int32_t>(), xyz_shape[0],
              queries.GetTensorData<float>(), query_offset.GetTensorData<int32_t>(), m,
              offset_shape[0], nsample, idx.GetTensorMutableData<int32_t>(),
              dist.GetTensorMutableData<float>(), parallel_for_of(context));
  }

  // idx and dist are (m, nsample), m being the query count.
  static void infer_shapes(const ShapeInference& shapes) {
    const auto queries = shapes.input(2) ? shapes.input(2) : shapes.input(0);
    Dim m;
    if (queries && !queries->empty()) m = (*queries)[0];
    const Dims dims{m, Dim{shapes.attribute("nsample", -1), ""}};
    shapes.set_output(0, kInt32, dims);
    shapes.set_output(1, kFloat, dims);
  }
};

}  // namespace

OrtCustomOp* knn_query_op() {
  static ClassicOp<KnnQuery> op;
  return &op;
}

}  // namespace customops::ort
