// A kernel call's tensors: their element types as the kernels see them,
// optional inputs, and shapes.
#pragma once

#include <optional>
#include <type_traits>

#include "ort_api.h"
#include "../kernels/half.h"
#include "../kernels/shape.h"

namespace customops::ort {

// The kernels' element type for an ORT element type T: the same, except
// that the kernels' Half stands for Ort::Float16_t (the same 16 bits).
template <typename T> struct KernelElement { using type = T; };
template <> struct KernelElement<Ort::Float16_t> { using type = Half; };
static_assert(sizeof(Half) == sizeof(Ort::Float16_t));
template <typename T> using KernelElementT = typename KernelElement<T>::type;

// The ONNX element type of float, double and Ort::Float16_t.
template <typename T>
constexpr ONNXTensorElementDataType kOnnxType =
    std::is_same_v<T, float>    ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
    : std::is_same_v<T, double> ? ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
                                : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;

// Input `index` of a kernel call, or nullopt when the node leaves that
// optional input out (by omitting it or giving it an empty name).
std::optional<Ort::ConstValue> optional_input(const Ort::KernelContext& context, size_t index);

Shape shape_of(const Ort::ConstValue& value);
OptionalShape shape_of(const std::optional<Ort::ConstValue>& value);

}  // namespace customops::ort
