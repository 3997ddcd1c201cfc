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

}  // namespace customops::ort
