// Private to knn_query.cpp: ordering points of each cloud along a Morton
// (Z-order) curve, so that rows close in the order are close in space.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "parallel.h"

namespace customops {
namespace knn {

// Calls fn(c, begin, end) for the rows of [begin, end) that belong to each
// cloud c in turn; cloud c holds rows [offset[c-1], offset[c]).
template <typename Fn>
void for_each_cloud_part(const int32_t* offset, int64_t b, int64_t begin,
                         int64_t end, Fn fn) {
  int64_t c = std::upper_bound(offset, offset + b, begin) - offset;
  for (int64_t i = begin; i < end; ++c) {
    const int64_t part_end = std::min<int64_t>(offset[c], end);
    fn(c, i, part_end);
    i = part_end;
  }
}

// Maps a bounding box onto a 2^16 grid per axis.
struct Frame {
  double lo[3] = {0, 0, 0};
  double scale[3] = {0, 0, 0};  // cells per unit length; 0 on a flat axis

  bool flat() const { return scale[0] == 0 && scale[1] == 0 && scale[2] == 0; }
};

constexpr int kCellBits = 16;

// The frame of the points point_at(i), i in [begin, end), where point_at
// returns a std::array<float, 3>.  Axes without a finite, positive extent
// get scale 0 (all points in cell 0).
template <typename PointAt>
Frame frame_of(int64_t begin, int64_t end, PointAt point_at) {
  Frame frame;
  if (begin == end) return frame;
  std::array<float, 3> lo = point_at(begin), hi = lo;
  for (int64_t i = begin + 1; i < end; ++i) {
    const std::array<float, 3> p = point_at(i);
    for (int d = 0; d < 3; ++d) {
      lo[d] = std::min(lo[d], p[d]);
      hi[d] = std::max(hi[d], p[d]);
    }
  }
  constexpr double kCells = (1 << kCellBits) - 1;
  for (int d = 0; d < 3; ++d) {
    const double extent = static_cast<double>(hi[d]) - lo[d];
    const double scale = kCells / extent;
    frame.lo[d] = lo[d];
    frame.scale[d] = extent > 0 && std::isfinite(scale) ? scale : 0.0;
  }
  return frame;
}

// Spreads the low 21 bits of v to every third bit.
inline uint64_t spread_bits(uint32_t v) {
  uint64_t x = v & 0x1fffff;
  x = (x | x << 32) & 0x001f'0000'0000'ffffULL;
  x = (x | x << 16) & 0x001f'0000'ff00'00ffULL;
  x = (x | x << 8) & 0x100f'00f0'0f00'f00fULL;
  x = (x | x << 4) & 0x10c3'0c30'c30c'30c3ULL;
  x = (x | x << 2) & 0x1249'2492'4924'9249ULL;
  return x;
}

// Morton code of a point in a frame.  Points outside the frame (queries)
// clamp to its border; NaN lands in cell 0.
inline uint64_t morton_code(const Frame& frame, const std::array<float, 3>& p) {
  constexpr double kLastCell = (1 << kCellBits) - 1;
  uint64_t code = 0;
  for (int d = 0; d < 3; ++d) {
    const double t = (p[d] - frame.lo[d]) * frame.scale[d];
    const uint32_t cell = !(t > 0)           ? 0u
                          : t >= kLastCell ? static_cast<uint32_t>(kLastCell)
                                           : static_cast<uint32_t>(t);
    code |= spread_bits(cell) << d;
  }
  return code;
}

// Sorts rows by key, stably (equal keys keep row order), with an LSD radix
// sort over 8-bit digits; digits that are the same for every key are skipped.
inline void radix_sort(uint64_t* keys, int32_t* rows, int64_t count) {
  constexpr int kDigits = 3 * kCellBits / 8;
  if (count < 2) return;
  std::vector<std::array<uint32_t, 256>> histogram(kDigits);
  for (auto& h : histogram) h.fill(0);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = keys[i];
    for (int digit = 0; digit < kDigits; ++digit) {
      ++histogram[digit][(key >> (8 * digit)) & 0xff];
    }
  }
  std::vector<uint64_t> keys_buffer(count);
  std::vector<int32_t> rows_buffer(count);
  uint64_t* keys_out = keys_buffer.data();
  int32_t* rows_out = rows_buffer.data();
  bool in_buffer = false;
  for (int digit = 0; digit < kDigits; ++digit) {
    const int shift = 8 * digit;
    auto& start = histogram[digit];
    if (start[(keys[0] >> shift) & 0xff] == count) continue;
    uint32_t sum = 0;
    for (uint32_t& s : start) sum += std::exchange(s, sum);
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t to = start[(keys[i] >> shift) & 0xff]++;
      keys_out[to] = keys[i];
      rows_out[to] = rows[i];
    }
    std::swap(keys, keys_out);
    std::swap(rows, rows_out);
    in_buffer = !in_buffer;
  }
  if (in_buffer) {  // the sorted data sits in the buffers: copy it back
    std::copy(keys, keys + count, keys_out);
    std::copy(rows, rows + count, rows_out);
  }
}

// Rows of all clouds and their Morton codes, each cloud's rows (still within
// its own range) sorted by code in that cloud's frame.
struct MortonOrder {
  std::vector<uint64_t> codes;
  std::vector<int32_t> rows;
};

inline MortonOrder morton_order(const float* xyz, const int32_t* offset,
                                int64_t b, const std::vector<Frame>& frames,
                                const ParallelFor& parallel_for) {
  const int64_t count = offset[b - 1];
  MortonOrder order;
  order.codes.resize(count);
  order.rows.resize(count);
  constexpr int64_t kCodeGrain = 1 << 14;
  parallel_for(count, kCodeGrain, [&](int64_t begin, int64_t end) {
    for_each_cloud_part(offset, b, begin, end,
                        [&](int64_t c, int64_t lo, int64_t hi) {
                          for (int64_t i = lo; i < hi; ++i) {
                            order.codes[i] = morton_code(
                                frames[c],
                                {xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]});
                            order.rows[i] = static_cast<int32_t>(i);
                          }
                        });
  });
  parallel_for(b, 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t lo = c == 0 ? 0 : offset[c - 1], hi = offset[c];
      radix_sort(order.codes.data() + lo, order.rows.data() + lo, hi - lo);
    }
  });
  return order;
}

}  // namespace knn
}  // namespace customops
