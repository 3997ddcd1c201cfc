// IEEE 754 half precision (binary16), the storage of torch.float16 and of
// ONNX's float16 (at::Half and Ort::Float16_t hold the same 16 bits).
//
// The kernels compute float16 data in float32 and round once on the way
// out, as torchvision's CPU kernels do; these conversions are all they need.
// Written out here because C++17 has no 16-bit float type and the kernels
// may not include torch or ONNX Runtime headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace customops {

struct Half {
  uint16_t bits;
};

// Exact: every half is a float.
inline float to_float(Half h) {
  const uint32_t sign = uint32_t{h.bits & 0x8000u} << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f, mantissa = h.bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  // Normal numbers rebias the exponent (15 -> 127); inf and NaN keep it all ones.
  const uint32_t bits = sign | (exponent == 0x1f ? 0x7f800000u : (exponent + 112) << 23) |
                        (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Rounds to nearest, ties to even (as numpy's astype(float16) and torch do);
// beyond the largest half (65504) to infinity; NaN stays NaN.
inline Half to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffffu;
  if (x >= 0x47800000u) {  // >= 65536 (rounds to inf), inf or NaN
    return {static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00))};
  }
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 puts the half's last mantissa bit (2^-24) at the float's
    // last bit, so the float addition itself rounds to nearest even.
    float shifted;
    std::memcpy(&shifted, &x, sizeof shifted);
    shifted += 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    return {static_cast<uint16_t>(sign | (bits - 0x3f000000u))};
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to
  // 10; a carry out of the mantissa correctly bumps the exponent (to inf at
  // the top).
  const uint32_t odd = (x >> 13) & 1;
  x += 0xc8000fffu + odd;
  return {static_cast<uint16_t>(sign | (x >> 13))};
}

}  // namespace customops
