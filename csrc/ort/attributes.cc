#include "attributes.h"

#include "status.h"

namespace customops::ort {
namespace {

// True when the node has attribute `name` at all, whatever its type: an int,
// ints, a float, floats or a string.
bool has_attribute(const Ort::ConstKernelInfo& info, const char* name) {
  const OrtApi& api = Ort::GetApi();
  int64_t i = 0;
  float f = 0;
  size_t size = 0;
  return succeeded(api.KernelInfoGetAttribute_int64(info, name, &i)) ||
         succeeded(api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &size)) ||
         succeeded(api.KernelInfoGetAttribute_float(info, name, &f)) ||
         succeeded(api.KernelInfoGetAttributeArray_float(info, name, nullptr, &size)) ||
         succeeded(api.KernelInfoGetAttribute_string(info, name, nullptr, &size));
}

}  // namespace

std::optional<int64_t> int_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                     const char* name) {
  int64_t value = 0;
  if (succeeded(Ort::GetApi().KernelInfoGetAttribute_int64(info, name, &value))) return value;
  check(!has_attribute(info, name), op, "attribute ", name, " must be an int");
  return std::nullopt;
}

std::optional<Shape> ints_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                    const char* name) {
  const OrtApi& api = Ort::GetApi();
  size_t size = 0, floats = 0;
  const bool ints = succeeded(api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &size));
  // ORT reads a float list as an empty int list (measured on 1.31).
  const bool float_list =
      succeeded(api.KernelInfoGetAttributeArray_float(info, name, nullptr, &floats)) && floats > 0;
  if (!ints || float_list) {
    check(!has_attribute(info, name), op, "attribute ", name, " must be a list of ints");
    return std::nullopt;
  }
  Shape values(size);
  Ort::ThrowOnError(api.KernelInfoGetAttributeArray_int64(info, name, values.data(), &size));
  return values;
}

}  // namespace customops::ort
