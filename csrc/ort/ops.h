// The operators of the custom domain, one function per op file.
#pragma once

#include <vector>

#include "ort_support.h"
#define ORT_API_MANUAL_INIT
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

namespace customops::ort {

OrtCustomOp* my_add_op();
OrtCustomOp* knn_query_op();
// One kernel per input type (float, double, float16), all named deform_conv2d.
std::vector<OrtCustomOp*> deform_conv2d_ops();

}  // namespace customops::ort
