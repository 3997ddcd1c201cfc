// A node's attributes, read when the session creates the kernel.
#pragma once

#include <cstdint>
#include <optional>

#include "ort_api.h"
#include "../kernels/shape.h"

namespace customops::ort {

// An int / ints attribute of a node, or nullopt when the node has none.  An
// attribute of another type (groups=2.0) is an argument error naming it, not
// a silent default.
std::optional<int64_t> int_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                     const char* name);
std::optional<Shape> ints_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                    const char* name);

}  // namespace customops::ort
