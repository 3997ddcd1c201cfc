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

// A shape as a message shows it, "[2, 3, 4]".  Only a view: check() formats
// its parts when the check fails, so a call whose checks pass (every call of
// a working model) builds no string.
struct ShapeText {
  const Shape& shape;
};

inline ShapeText to_text(const Shape& shape) { return {shape}; }

inline std::ostream& operator<<(std::ostream& out, const ShapeText& text) {
  out << '[';
  for (size_t i = 0; i < text.shape.size(); ++i) out << (i ? ", " : "") << text.shape[i];
  return out << ']';
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
