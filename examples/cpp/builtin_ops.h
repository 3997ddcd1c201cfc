// The project's ops compiled into the program itself, for deployments that
// ship one binary and no plugin library (the way the classic C++ examples add
// a domain: Ort::CustomOpDomain + SessionOptions::Add).
#pragma once

#include <onnxruntime_c_api.h>

// The domain "custom" with my_add, knnquery and deform_conv2d.  It lives
// until the program ends: sessions keep pointers into it.
OrtCustomOpDomain* builtin_ops();
