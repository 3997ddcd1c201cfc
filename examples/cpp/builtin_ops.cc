#include "builtin_ops.h"

#include "../../csrc/ort/ops.h"

OrtCustomOpDomain* builtin_ops() {
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d(customops::ort::kDomain);
    for (OrtCustomOp* op : customops::ort::all_ops()) d.Add(op);
    return d;
  }();
  return domain;
}
