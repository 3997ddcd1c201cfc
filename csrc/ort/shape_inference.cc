#include "shape_inference.h"

#include <atomic>

#include "status.h"

namespace customops::ort {
namespace {

// The type and shape of input `index`, owned by the context (null when absent).
const OrtTensorTypeAndShapeInfo* input_info(OrtShapeInferContext* context, size_t index) {
  const OrtApi& api = Ort::GetApi();
  size_t count = 0;
  Ort::ThrowOnError(api.ShapeInferContext_GetInputCount(context, &count));
  if (index >= count) return nullptr;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  return succeeded(api.ShapeInferContext_GetInputTypeShape(context, index, &info)) ? info : nullptr;
}

}  // namespace

ONNXTensorElementDataType ShapeInference::input_type(size_t index) const {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  if (const OrtTensorTypeAndShapeInfo* info = input_info(context_, index)) {
    Ort::ThrowOnError(Ort::GetApi().GetTensorElementType(info, &type));
  }
  return type;
}

std::optional<Dims> ShapeInference::input(size_t index) const {
  const OrtApi& api = Ort::GetApi();
  const OrtTensorTypeAndShapeInfo* info = input_info(context_, index);
  if (info == nullptr) return std::nullopt;
  size_t rank = 0;
  Ort::ThrowOnError(api.GetDimensionsCount(info, &rank));
  std::vector<int64_t> values(rank);
  std::vector<const char*> symbols(rank, nullptr);
  Ort::ThrowOnError(api.GetDimensions(info, values.data(), rank));
  Ort::ThrowOnError(api.GetSymbolicDimensions(info, symbols.data(), rank));
  Dims dims(rank);
  for (size_t i = 0; i < rank; ++i) {
    dims[i].value = values[i];
    if (symbols[i] != nullptr) dims[i].symbol = symbols[i];
  }
  return dims;
}

int64_t ShapeInference::attribute(const char* name, int64_t fallback) const {
  const OrtApi& api = Ort::GetApi();
  const OrtOpAttr* attr = nullptr;
  if (!succeeded(api.ShapeInferContext_GetAttribute(context_, name, &attr)) || attr == nullptr) {
    return fallback;
  }
  int64_t value = 0;
  size_t size = 0;
  return succeeded(api.ReadOpAttr(attr, ORT_OP_ATTR_INT, &value, sizeof(value), &size)) ? value
                                                                                 : fallback;
}

void ShapeInference::set_output(size_t index, ONNXTensorElementDataType type,
                                const Dims& dims) const {
  // ORT turns a dim without a symbol into dim_value, so an unknown one (-1)
  // would become a literal -1 that every run contradicts (ORT then logs a
  // VerifyOutputSizes warning).  Unknown dims get a fresh symbol instead, as
  // ORT's own inference does ("unk__N").
  static std::atomic<int64_t> unknown{0};
  std::vector<int64_t> values;
  std::vector<std::string> names;
  for (const Dim& dim : dims) {
    values.push_back(dim.value);
    names.push_back(dim.value < 0 && dim.symbol.empty()
                        ? "customops_unk__" + std::to_string(unknown++)
                        : dim.symbol);
  }
  std::vector<const char*> symbols;
  for (const std::string& name : names) symbols.push_back(name.c_str());
  Ort::TensorTypeAndShapeInfo info{nullptr};
  const OrtApi& api = Ort::GetApi();
  OrtTensorTypeAndShapeInfo* raw = nullptr;
  Ort::ThrowOnError(api.CreateTensorTypeAndShapeInfo(&raw));
  info = Ort::TensorTypeAndShapeInfo{raw};  // releases it on every path
  Ort::ThrowOnError(api.SetTensorElementType(raw, type));
  Ort::ThrowOnError(api.SetDimensions(raw, values.data(), values.size()));
  Ort::ThrowOnError(api.SetSymbolicDimensions(raw, symbols.data(), symbols.size()));
  Ort::ThrowOnError(api.ShapeInferContext_SetOutputTypeShape(context_, index, raw));
}

}  // namespace customops::ort
