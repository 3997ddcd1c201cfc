// Errors cross the C boundary as an OrtStatus, never as an exception.
#pragma once

#include <functional>

#include "ort_api.h"

namespace customops::ort {

// Runs fn and converts any exception into an OrtStatus (nullptr = success):
// argument errors become ORT_INVALID_ARGUMENT with the kernel's message.
OrtStatusPtr guarded(const std::function<void()>& fn) noexcept;

// True when an API call succeeded (null status); a failure's status is
// released, for calls whose failure only means "no such thing".
inline bool succeeded(OrtStatus* status) { return Ort::Status{status}.IsOK(); }

}  // namespace customops::ort
