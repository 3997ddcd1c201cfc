// What ms_deform_attn's forward and backward share: the levels, one bilinear
// sample's corners and weights, the finiteness check, float16 widening.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ms_deform_attn.h"

namespace customops::ms_deform_attn_detail {

inline constexpr const char* kOp = "ms_deform_attn";

struct Level {
  int64_t height, width, start;
};

// The levels of a checked call.
inline std::vector<Level> levels_of(const MsDeformAttnParams& p, const int64_t* spatial_shapes,
                                    const int64_t* level_start_index) {
  std::vector<Level> levels(p.levels);
  for (int64_t l = 0; l < p.levels; ++l)
    levels[l] = {spatial_shapes[2 * l], spatial_shapes[2 * l + 1], level_start_index[l]};
  return levels;
}

// One bilinear sample: the rows (y * W + x within its level) of its four
// corners, top-left, top-right, bottom-left, bottom-right, -1 for a corner
// outside the level (it reads zero); and the fractional parts of the pixel
// position (lh, lw) with their complements (hh, hw).
template <typename A>
struct Sample {
  int64_t row[4];
  A lh, lw, hh, hw;
};

// The sample at location (x, y) in [0, 1] of a level of height x width
// pixels, at pixel (x * width - 0.5, y * height - 0.5) as grid_sample with
// align_corners=False.  False when every corner is outside, as mmcv tests
// before reading any; this also keeps floor() of a huge location from an
// integer conversion that would overflow.
template <typename A>
__attribute__((always_inline)) inline bool sample_at(A x, A y, const Level& level,
                                                     Sample<A>& s) {
  const A h = y * static_cast<A>(level.height) - A(0.5);
  const A w = x * static_cast<A>(level.width) - A(0.5);
  if (!(h > A(-1) && w > A(-1) && h < static_cast<A>(level.height) &&
        w < static_cast<A>(level.width)))
    return false;
  const A h_low = std::floor(h), w_low = std::floor(w);
  const int64_t y0 = static_cast<int64_t>(h_low), x0 = static_cast<int64_t>(w_low);
  s.lh = h - h_low, s.lw = w - w_low, s.hh = A(1) - s.lh, s.hw = A(1) - s.lw;
  const bool top = y0 >= 0, bottom = y0 + 1 < level.height;
  const bool left = x0 >= 0, right = x0 + 1 < level.width;
  const int64_t row = y0 * level.width + x0;
  s.row[0] = top && left ? row : -1;
  s.row[1] = top && right ? row + 1 : -1;
  s.row[2] = bottom && left ? row + level.width : -1;
  s.row[3] = bottom && right ? row + level.width + 1 : -1;
  return true;
}

// Refuses a NaN or infinite sampling location, naming the first.  x is NaN
// or infinite exactly when x - x is not 0; OR-ing that test over a block
// vectorises (an early exit would not), so the pass costs little beside the
// sampling, and the search for the first bad value runs only in a bad block.
template <typename T>
void check_finite_locations(const T* locations, const MsDeformAttnParams& p,
                            const ParallelFor& parallel_for) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t count = p.batch * p.queries * p.heads * p.levels * p.points * 2;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<char> bad(blocks, 0);
  parallel_for(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t stop = std::min(count, (block + 1) * kBlock);
      bool any = false;
      for (int64_t i = block * kBlock; i < stop; ++i) any |= !(locations[i] - locations[i] == 0);
      bad[block] = any;
    }
  });
  for (int64_t block = 0; block < blocks; ++block) {
    if (!bad[block]) continue;
    for (int64_t i = block * kBlock;; ++i) {
      if (std::isfinite(locations[i])) continue;
      // (n, q, m, l, p, c) of flat index i, last dimension first
      int64_t index[6], rest = i;
      const int64_t sizes[6] = {p.batch, p.queries, p.heads, p.levels, p.points, 2};
      for (int k = 5; k >= 0; --k) index[k] = rest % sizes[k], rest /= sizes[k];
      check(false, kOp, "sampling_locations must be finite (no NaN or inf), got ",
            locations[i], " at sampling_locations[", index[0], ", ", index[1], ", ", index[2],
            ", ", index[3], ", ", index[4], ", ", index[5], "]");
    }
  }
}

// float16 data as floats, and back (rounded once).
inline std::vector<float> widened(const Half* values, int64_t count) {
  std::vector<float> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = to_float(values[i]);
  return out;
}

inline void narrow(const std::vector<float>& values, Half* out) {
  for (size_t i = 0; i < values.size(); ++i) out[i] = to_half(values[i]);
}

}  // namespace customops::ms_deform_attn_detail
