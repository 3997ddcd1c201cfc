#include "builtin_ops.h"

#include "../../csrc/ort/ops.h"

OrtCustomOpDomain* builtin_ops() {
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d(customops::ort::kDomain);
    d.Add(customops::ort::my_add_op());
    d.Add(customops::ort::knn_query_op());
    d.Add(customops::ort::deform_conv2d_op());
    return d;
  }();
  return domain;
}
