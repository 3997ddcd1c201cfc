// Shapes and argument errors shared by both bindings.
//
// Kernels validate their arguments here, once, and throw
// std::invalid_argument with a message that names the argument and what was
// expected.  The PyTorch binding turns it into a c10::Error (RuntimeError in
// Python), the ONNX Runtime binding into an OrtStatus with
// ORT_INVALID_ARGUMENT, so both report the same words.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace customops {

using Shape = std::vector<int64_t>;
// The shape of an optional input; empty when the input is absent.
using OptionalShape = std::optional<Shape>;

// "[2, 3, 4]"
inline std::string to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

// Throws std::invalid_argument("<op>: <message parts...>") unless ok.
template <typename... Parts>
void check(bool ok, const char* op, const Parts&... parts) {
  if (ok) return;
  std::ostringstream out;
  out << op << ": ";
  (out << ... << parts);
  throw std::invalid_argument(out.str());
}

}  // namespace customops
