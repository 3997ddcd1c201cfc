#include "ort_support.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <stdexcept>
#include <string>

namespace customops::ort {

OrtStatusPtr guarded(const std::function<void()>& fn) noexcept {
  const OrtApi& api = Ort::GetApi();
  try {
    fn();
    return nullptr;
  } catch (const std::invalid_argument& error) {
    return api.CreateStatus(ORT_INVALID_ARGUMENT, error.what());
  } catch (const Ort::Exception& error) {
    return api.CreateStatus(error.GetOrtErrorCode(), error.what());
  } catch (const std::bad_alloc&) {
    return api.CreateStatus(ORT_FAIL, "customops: out of memory");
  } catch (const std::exception& error) {
    return api.CreateStatus(ORT_FAIL, error.what());
  } catch (...) {
    return api.CreateStatus(ORT_FAIL, "customops: unknown error");
  }
}

ParallelFor parallel_for_of(const Ort::KernelContext& context) {
  return [context](int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    // Enough chunks to balance the pool's threads, few enough that each one
    // amortises its scheduling; ORT picks the threads.
    constexpr int64_t kMaxChunks = 64;
    const int64_t chunks = std::min(kMaxChunks, (n + std::max<int64_t>(grain, 1) - 1) /
                                                    std::max<int64_t>(grain, 1));
    if (chunks <= 1) {
      body(0, n);
      return;
    }
    struct Job {
      int64_t n, chunks;
      const std::function<void(int64_t, int64_t)>* body;
    } job{n, chunks, &body};
    context.ParallelFor(
        [](void* data, size_t i) {
          const Job& j = *static_cast<const Job*>(data);
          const int64_t chunk = static_cast<int64_t>(i);
          (*j.body)(j.n * chunk / j.chunks, j.n * (chunk + 1) / j.chunks);
        },
        static_cast<size_t>(chunks), 0, &job);
  };
}

std::optional<Ort::ConstValue> optional_input(const Ort::KernelContext& context, size_t index) {
  if (index >= context.GetInputCount()) return std::nullopt;
  Ort::ConstValue value = context.GetInput(index);
  if (static_cast<const OrtValue*>(value) == nullptr) return std::nullopt;
  return value;
}

Shape shape_of(const Ort::ConstValue& value) {
  return value.GetTensorTypeAndShapeInfo().GetShape();
}

OptionalShape shape_of(const std::optional<Ort::ConstValue>& value) {
  return value ? OptionalShape(shape_of(*value)) : std::nullopt;
}

namespace {

bool ok(OrtStatus* status) { return Ort::Status{status}.IsOK(); }

// True when the node has attribute `name` at all, whatever its type: an int,
// ints, a float, floats or a string.
bool has_attribute(const Ort::ConstKernelInfo& info, const char* name) {
  const OrtApi& api = Ort::GetApi();
  int64_t i = 0;
  float f = 0;
  size_t size = 0;
  return ok(api.KernelInfoGetAttribute_int64(info, name, &i)) ||
         ok(api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &size)) ||
         ok(api.KernelInfoGetAttribute_float(info, name, &f)) ||
         ok(api.KernelInfoGetAttributeArray_float(info, name, nullptr, &size)) ||
         ok(api.KernelInfoGetAttribute_string(info, name, nullptr, &size));
}

}  // namespace

std::optional<int64_t> int_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                     const char* name) {
  int64_t value = 0;
  if (ok(Ort::GetApi().KernelInfoGetAttribute_int64(info, name, &value))) return value;
  check(!has_attribute(info, name), op, "attribute ", name, " must be an int");
  return std::nullopt;
}

std::optional<Shape> ints_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                    const char* name) {
  const OrtApi& api = Ort::GetApi();
  size_t size = 0, floats = 0;
  const bool ints = ok(api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &size));
  // ORT reads a float list as an empty int list (measured on 1.31).
  const bool float_list =
      ok(api.KernelInfoGetAttributeArray_float(info, name, nullptr, &floats)) && floats > 0;
  if (!ints || float_list) {
    check(!has_attribute(info, name), op, "attribute ", name, " must be a list of ints");
    return std::nullopt;
  }
  Shape values(size);
  Ort::ThrowOnError(api.KernelInfoGetAttributeArray_int64(info, name, values.data(), &size));
  return values;
}

// The type and shape of input `index`, owned by the context (null when absent).
const OrtTensorTypeAndShapeInfo* input_info(OrtShapeInferContext* context, size_t index) {
  const OrtApi& api = Ort::GetApi();
  size_t count = 0;
  Ort::ThrowOnError(api.ShapeInferContext_GetInputCount(context, &count));
  if (index >= count) return nullptr;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  return ok(api.ShapeInferContext_GetInputTypeShape(context, index, &info)) ? info : nullptr;
}

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
  if (!ok(api.ShapeInferContext_GetAttribute(context_, name, &attr)) || attr == nullptr) {
    return fallback;
  }
  int64_t value = 0;
  size_t size = 0;
  return ok(api.ReadOpAttr(attr, ORT_OP_ATTR_INT, &value, sizeof(value), &size)) ? value
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
