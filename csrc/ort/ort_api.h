// ORT's C++ API, initialised by hand (Ort::InitApi in RegisterCustomOps):
// the library asks the runtime that loads it for its own API version rather
// than trusting the headers' ORT_API_VERSION.  Every file of the library
// includes ORT through here, so all of them agree on that.
#pragma once

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT
