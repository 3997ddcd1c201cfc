// The operators of the custom domain, one function per op file.
#pragma once

#include "ort_support.h"
#define ORT_API_MANUAL_INIT
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

namespace customops::ort {

// my_add has one kernel per element type, all under the one name.
std::vector<OrtCustomOp*> my_add_ops();
OrtCustomOp* knn_query_op();
OrtCustomOp* deform_conv2d_op();

// Every op of the domain: what RegisterCustomOps adds, and what a program
// that compiles the kernels in (examples/cpp, --builtin) adds itself.
inline std::vector<OrtCustomOp*> all_ops() {
  std::vector<OrtCustomOp*> ops = my_add_ops();
  ops.push_back(knn_query_op());
  ops.push_back(deform_conv2d_op());
  return ops;
}

}  // namespace customops::ort
