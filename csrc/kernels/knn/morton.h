// Private to knn_query.cpp: ordering points of each cloud along a Morton
// (Z-order) curve, so that rows close in the order are close in space.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "../parallel.h"

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

constexpr int kCodeBytes = 3 * kCellBits / 8;  // 8-bit digits of a code

// Sorts rows by the low `digits` bytes of key, stably (equal keys keep row
// order), with an LSD radix sort; digits that are the same for every key
// are skipped.
inline void radix_sort_serial(uint64_t* keys, int32_t* rows, int64_t count,
                              int digits = kCodeBytes) {
  if (count < 2) return;
  std::vector<std::array<uint32_t, 256>> histogram(digits);
  for (auto& h : histogram) h.fill(0);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = keys[i];
    for (int digit = 0; digit < digits; ++digit) {
      ++histogram[digit][(key >> (8 * digit)) & 0xff];
    }
  }
  std::vector<uint64_t> keys_buffer(count);
  std::vector<int32_t> rows_buffer(count);
  uint64_t* keys_out = keys_buffer.data();
  int32_t* rows_out = rows_buffer.data();
  bool in_buffer = false;
  for (int digit = 0; digit < digits; ++digit) {
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

// The same sort on the pool, in three parallel steps (few, because every
// step is a barrier that waits for the slowest thread): count the top digit
// per chunk of keys, scatter the chunks by it (chunk j's keys of a value after
// those of chunks < j, so stable), then sort each of the 256 buckets on the
// lower digits.  Clustered keys make the buckets uneven; at worst one bucket
// holds everything and the last step is the serial sort.
inline void radix_sort(uint64_t* keys, int32_t* rows, int64_t count,
                       const ParallelFor& parallel_for) {
  constexpr int64_t kChunk = 1 << 14;
  if (count < 2 * kChunk) {
    radix_sort_serial(keys, rows, count);
    return;
  }
  constexpr int kTopShift = 8 * (kCodeBytes - 1);
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  const auto chunk_end = [count](int64_t j) { return std::min(count, (j + 1) * kChunk); };
  std::vector<std::array<uint32_t, 256>> start(chunks);
  parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; ++j) {
      start[j].fill(0);
      for (int64_t i = j * kChunk; i < chunk_end(j); ++i) ++start[j][keys[i] >> kTopShift];
    }
  });
  std::array<uint32_t, 257> bucket{};  // bucket v is [bucket[v], bucket[v + 1])
  uint32_t sum = 0;
  for (int v = 0; v < 256; ++v) {
    bucket[v] = sum;
    for (int64_t j = 0; j < chunks; ++j) sum += std::exchange(start[j][v], sum);
  }
  bucket[256] = sum;
  std::vector<uint64_t> keys_buffer(count);
  std::vector<int32_t> rows_buffer(count);
  parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; ++j) {
      for (int64_t i = j * kChunk; i < chunk_end(j); ++i) {
        const uint32_t to = start[j][keys[i] >> kTopShift]++;
        keys_buffer[to] = keys[i];
        rows_buffer[to] = rows[i];
      }
    }
  });
  parallel_for(256, 1, [&](int64_t first, int64_t last) {
    for (int64_t v = first; v < last; ++v) {
      const int64_t lo = bucket[v], size = bucket[v + 1] - lo;
      radix_sort_serial(keys_buffer.data() + lo, rows_buffer.data() + lo, size,
                        kCodeBytes - 1);
      std::copy_n(keys_buffer.data() + lo, size, keys + lo);
      std::copy_n(rows_buffer.data() + lo, size, rows + lo);
    }
  });
}

// Calls fn(c, begin, end, inner) for every cloud c, rows [begin, end).
// A cloud big enough to keep every thread busy on its own gets the pool
// (inner = parallel_for) and is handled alone; the others run side by side,
// one cloud per task (inner = serial_for).  The pool is never entered twice.
template <typename Fn>
void for_each_cloud(const int32_t* offset, int64_t b,
                    const ParallelFor& parallel_for, Fn fn) {
  constexpr int64_t kBigCloud = 1 << 15;
  const auto range = [offset](int64_t c) {
    return std::pair<int64_t, int64_t>{c == 0 ? 0 : offset[c - 1], offset[c]};
  };
  std::vector<int64_t> small;
  for (int64_t c = 0; c < b; ++c) {
    const auto [lo, hi] = range(c);
    if (hi - lo >= kBigCloud) {
      fn(c, lo, hi, parallel_for);
    } else {
      small.push_back(c);
    }
  }
  const ParallelFor serial = serial_for;
  parallel_for(static_cast<int64_t>(small.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto [lo, hi] = range(small[i]);
      fn(small[i], lo, hi, serial);
    }
  });
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
  for_each_cloud(offset, b, parallel_for,
                 [&](int64_t, int64_t lo, int64_t hi, const ParallelFor& inner) {
                   radix_sort(order.codes.data() + lo, order.rows.data() + lo,
                              hi - lo, inner);
                 });
  return order;
}

}  // namespace knn
}  // namespace customops
