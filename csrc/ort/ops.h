// The operators of the custom domain, one function per op file, and what an
// op file needs: the classic op template, its tensors, attributes and the
// session's thread pool.
#pragma once

#include <vector>

#include "attributes.h"
#include "classic_op.h"
#include "thread_pool.h"
#include "values.h"

namespace customops::ort {

// The ops' ONNX domain (customops/ort.py DOMAIN in Python).  Kernels are
// registered without a version range, so they serve every version of it.
inline constexpr const char* kDomain = "custom";

// One kernel per input type (float, double, float16), all named my_add.
std::vector<OrtCustomOp*> my_add_ops();
OrtCustomOp* knn_query_op();
// One kernel per input type (float, double, float16), all named deform_conv2d.
std::vector<OrtCustomOp*> deform_conv2d_ops();
// One kernel per float type (float, double, float16), all named ms_deform_attn.
std::vector<OrtCustomOp*> ms_deform_attn_ops();

// Every op of the domain: what RegisterCustomOps adds, and what a program
// that compiles the kernels in (examples/cpp, --builtin) adds itself.
inline std::vector<OrtCustomOp*> all_ops() {
  std::vector<OrtCustomOp*> ops = my_add_ops();
  ops.push_back(knn_query_op());
  for (OrtCustomOp* op : deform_conv2d_ops()) ops.push_back(op);
  for (OrtCustomOp* op : ms_deform_attn_ops()) ops.push_back(op);
  return ops;
}

}  // namespace customops::ort
