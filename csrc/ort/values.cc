#include "values.h"

namespace customops::ort {

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

}  // namespace customops::ort
