// What the forward and backward deform_conv2d kernels share: the bilinear
// sampling of a tile's pixels, the copies of the images between their layout
// and the channels-last one the sampling reads, and the tiling of the output
// pixels.  Private to deform_conv2d*.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "deform_conv2d.h"
#include "cpu/simd.h"

namespace customops {
namespace deform_detail {

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tiling of the output pixels: a tile's im2col rows should stay in L2 next
// to the weights, and there should be enough tiles for the threads to share
// evenly (at least kMinTasks per call when the image is big enough).
constexpr int64_t kColumnBytes = 96 * 1024;  // best of 32-144 KiB, measured
constexpr int64_t kMinTasks = 16;

// Pixels per tile: a multiple of `unit` within the L2 budget, and enough
// tiles for the threads; the tiles of one image come out (nearly) equal.
// Depends on the shapes only, never on the thread count.
inline int64_t tile_pixels(const DeformConv2dParams& p, int64_t row_bytes, int64_t unit) {
  const int64_t pixels = p.out_h * p.out_w;
  const int64_t fit = std::max(unit, kColumnBytes / row_bytes / unit * unit);
  const int64_t tiles_wanted = ceil_div(kMinTasks, std::max<int64_t>(p.batch, 1));
  const int64_t balanced = round_up(ceil_div(pixels, tiles_wanted), unit);
  const int64_t tile = std::min({fit, balanced, round_up(pixels, unit)});
  return round_up(ceil_div(pixels, ceil_div(pixels, tile)), unit);
}

// The unit of tile_pixels: whole row blocks of the GEMM (mr pixels) that
// also fill whole cache lines of a per-pixel plane (the offset and mask
// gradients, the kept corners), so that two threads on neighbouring tiles
// never write one line (in planes whose size is a multiple of the line).
template <typename T>
int64_t tile_unit(int64_t mr) {
  return std::lcm(mr, int64_t{64 / sizeof(T)});
}

// One thread's arrays for sample_tap over a tile: `stride` >= tile values
// per pixel array, whole vectors of any width, so that sample_tap may store
// whole vectors past the tile's end.  Each array starts on a cache line and
// fills whole lines, so that two threads' arrays never share a line (as
// std::vectors placed next to each other by malloc they could, and each
// thread's writes would then evict the other's line; not seen to matter
// in the measurements, docs/benchmarks.md).
template <typename T>
struct SampleScratch {
  static constexpr int64_t kMaxLanes = 16;  // values per vector, at most

  explicit SampleScratch(int64_t tile)
      : stride(round_up(tile, kMaxLanes)),
        position(zeros<T>(2 * stride)),
        weight(zeros<T>(4 * stride)),
        pixel(zeros<uint32_t>(4 * stride)),
        fraction(zeros<T>(2 * stride)) {}
  int64_t stride;
  AlignedArray<T> position;      // y then x of each pixel's first tap, unshifted
  AlignedArray<T> weight;        // the 4 corner weights of each pixel (mask folded in)
  AlignedArray<uint32_t> pixel;  // the 4 corner pixels (flat, in one image)
  AlignedArray<T> fraction;      // ly then lx of each pixel (the backward's)

 private:
  template <typename U>
  static AlignedArray<U> zeros(int64_t n) {
    static_assert(kMaxLanes * sizeof(U) % 64 == 0, "whole cache lines");
    AlignedArray<U> array = aligned_array<U>(n);
    std::fill_n(array.get(), n, U{0});
    return array;
  }
};

// Asks for the next tile's values of a per-pixel plane (`at`: this tile's
// first value; the plane holds `left` values from there on), to be read
// (kRead) or written.  Per tap a tile reads 2 or 3 such planes (offset,
// mask), planes apart, and the backward writes 2 or 3 more (their
// gradients); the hardware prefetchers did not have them in cache in time.
// Measured at 128x128, one thread (AMD EPYC Zen 4), paired runs: the
// forward's sampling 0.75 -> 0.35 ms, the backward's 1.0 -> 0.66 and its
// gather (which writes the gradients) 6.6 -> 5.5 ms.  Always inlined:
// without that, GCC 12 dropped the calls (no prefetch in the object code).
enum class Access { kRead, kWrite };

template <Access A, typename T>
__attribute__((always_inline)) inline void prefetch_next_tile(const T* at, int64_t tile,
                                                              int64_t left) {
  if (2 * tile > left) return;
  for (int64_t t = tile; t < 2 * tile; t += 64 / sizeof(T))
    __builtin_prefetch(at + t, A == Access::kWrite);
}

// How the sampler treats a sample exactly one pixel above or left of the
// image (y == -1 or x == -1), where the bilinear value is 0 either way.
// kValue reads nothing there (torchvision's bilinear_interpolate, the
// forward); kGradient takes the cell below / right of it, as torchvision's
// backward (get_coordinate_weight) does, so that the offset gradient there
// is the one-sided derivative into the image, not 0.  That case is common:
// zero offsets with padding 1 put the first tap at -1.
enum class Edge { kValue, kGradient };

// torchvision's bilinear_interpolate, times the mask, at one tap for every
// pixel of a tile, W pixels per step: four corner pixels (flat indices into
// one H x W image) and their weights per pixel, corner by corner.  A corner
// outside the image gets the zero pixel H * W (see copy_layout) and
// weight 0, so the channel loop needs no branches and reads no image value
// there.  Written with explicit vectors because the compiler does not
// vectorize the equivalent scalar loop (floor and int conversion under
// selects defeat its if-conversion).  pos_y and pos_x hold whole vectors;
// dy, dx and mask (null: all ones) only `pixels` values.  With a non-null
// `fraction`, the distances below and right of the top-left corner (ly, lx;
// 0 outside) go to fraction[t] and fraction[stride + t].
// Values per vector sample_tap runs with in code built for W-wide vectors:
// at most 32 bytes.  GCC 12 compiles its comparisons of 64-byte vectors
// (AVX-512, where a comparison yields a mask register) into one scalar
// vcomiss per lane: 9 taps of a 128x128 tile took 0.58 ms with 16 floats per
// vector and 0.26 ms with 8 in the same AVX-512 function (0.25 ms in AVX2
// code), the same corners and weights.
template <typename T, int W>
constexpr int sample_lanes() {
  return std::min<int>(W, 32 / sizeof(T));
}

template <typename T, int W, Edge E = Edge::kValue>
__attribute__((always_inline)) inline void sample_tap(
    int64_t pixels, const T* pos_y, const T* pos_x, T shift_y, T shift_x, const T* dy,
    const T* dx, const T* mask, int64_t height, int64_t width, T* weight, uint32_t* pixel,
    int64_t stride, T* fraction = nullptr) {
  using V = Vec<T, W>;
  using Mask = decltype(V{} < V{});  // -1 / 0 per lane, as wide as T
  using I = Vec<int32_t, W>;
  using U = Vec<uint32_t, W>;
  const V h = V{} + static_cast<T>(height), w = V{} + static_cast<T>(width);
  const U zero = U{} + static_cast<uint32_t>(height * width);  // <= 2^31 - 1
  const uint32_t row = static_cast<uint32_t>(width);
  for (int64_t t = 0; t < pixels; t += W) {
    V py, px, oy, ox, m = V{} + 1;
    load<T, W>(py, pos_y + t), load<T, W>(px, pos_x + t);
    if (t + W <= pixels) {
      load<T, W>(oy, dy + t), load<T, W>(ox, dx + t);
      if (mask) load<T, W>(m, mask + t);
    } else {  // the last, partial vector: zeros past the tile's end
      oy = ox = V{};
      for (int64_t i = 0; t + i < pixels; ++i)
        oy[i] = dy[t + i], ox[i] = dx[t + i], m[i] = mask ? mask[t + i] : T{1};
    }
    // pos + shift is the integer torchvision adds the offset to: exact
    // below 2^24 (float) or 2^53 (double), so the rounding is the same.
    V y = py + shift_y + oy, x = px + shift_x + ox;
    // torchvision's bounds test, written so that NaN offsets also read zero.
    const Mask in = E == Edge::kValue ? (y > -1) & (y < h) & (x > -1) & (x < w)
                                      : (y >= -1) & (y < h) & (x >= -1) & (x < w);
    // Samples outside get weight 0 below; zeroing them (NaN included) only
    // keeps their int32 conversion defined.
    y = in ? y : V{}, x = in ? x : V{};
    const I inside = __builtin_convertvector(in, I);
    // floor: truncate, then step down where that rounded up (y < 0).
    I y0 = __builtin_convertvector(y, I), x0 = __builtin_convertvector(x, I);
    y0 += __builtin_convertvector(__builtin_convertvector(y0, V) > y, I);
    x0 += __builtin_convertvector(__builtin_convertvector(x0, V) > x, I);
    const V ly = y - __builtin_convertvector(y0, V), lx = x - __builtin_convertvector(x0, V);
    const V hy = 1 - ly, hx = 1 - lx;
    const I top = inside & (y0 >= 0), bottom = inside & (y0 + 1 < static_cast<int32_t>(height));
    const I left = x0 >= 0, right = x0 + 1 < static_cast<int32_t>(width);
    // Unsigned, so that the corners not taken may wrap around harmlessly.
    const U base = __builtin_convertvector(y0, U) * row + __builtin_convertvector(x0, U);
    const U below = base + row;
    const I taken[4] = {top & left, top & right, bottom & left, bottom & right};
    const U corner[4] = {base, base + 1, below, below + 1};
    const V share[4] = {m * hy * hx, m * hy * lx, m * ly * hx, m * ly * lx};
    for (int q = 0; q < 4; ++q) {
      store<uint32_t, W>(pixel + q * stride + t, taken[q] ? corner[q] : zero);
      store<T, W>(weight + q * stride + t,
                  __builtin_convertvector(taken[q], Mask) ? share[q] : V{});
    }
    if (fraction) store<T, W>(fraction + t, ly), store<T, W>(fraction + stride + t, lx);
  }
}

// The two layouts of a batch of images: planar (batch, C, H*W), as given,
// and channels last (batch, H*W + 1, C) with a zero last pixel, as sampled.
enum class Layout { kPlanar, kChannelsLast };

// Pixels per task of copy_layout: C x 64 values stay in L1.
constexpr int64_t kCopyPixels = 64;

// Writes the W x W block at `in` (rows in_stride apart) transposed to `out`
// (rows out_stride apart), for one 16-byte vector per row: 4 floats or 2
// doubles, transposed in registers by shuffles.
template <typename T, int W>
__attribute__((always_inline)) inline void transpose_block(const T* in, int64_t in_stride,
                                                           T* out, int64_t out_stride) {
  static_assert(W * sizeof(T) == vector_bytes(Isa::kBaseline), "one baseline vector per row");
  using Lanes = Vec<std::conditional_t<sizeof(T) == 4, int32_t, int64_t>, W>;
  Vec<T, W> r[W];
  for (int i = 0; i < W; ++i) load<T, W>(r[i], in + i * in_stride);
  if constexpr (W == 2) {
    const Vec<T, W> r0 = r[0];
    r[0] = __builtin_shuffle(r0, r[1], Lanes{0, 2});
    r[1] = __builtin_shuffle(r0, r[1], Lanes{1, 3});
  } else {
    const Vec<T, W> t0 = __builtin_shuffle(r[0], r[1], Lanes{0, 4, 1, 5}),
                    t1 = __builtin_shuffle(r[0], r[1], Lanes{2, 6, 3, 7}),
                    t2 = __builtin_shuffle(r[2], r[3], Lanes{0, 4, 1, 5}),
                    t3 = __builtin_shuffle(r[2], r[3], Lanes{2, 6, 3, 7});
    r[0] = __builtin_shuffle(t0, t2, Lanes{0, 1, 4, 5});
    r[1] = __builtin_shuffle(t0, t2, Lanes{2, 3, 6, 7});
    r[2] = __builtin_shuffle(t1, t3, Lanes{0, 1, 4, 5});
    r[3] = __builtin_shuffle(t1, t3, Lanes{2, 3, 6, 7});
  }
  for (int j = 0; j < W; ++j) store<T, W>(out + j * out_stride, r[j]);
}

// out[j * out_stride + i] = in[i * in_stride + j] for i < rows, j < cols, in
// blocks of W x W transposed in registers, the blocks walked along the rows
// of `in` (InRowsOuter) or of `out`: along the rows of a planar image, as
// going down its columns would hit rows a multiple of 4 KiB apart, which
// share one L1 set.
template <bool InRowsOuter, typename T>
__attribute__((always_inline)) inline void transpose(const T* in, int64_t in_stride, int64_t rows,
                                                     int64_t cols, T* out, int64_t out_stride) {
  constexpr int W = vector_bytes(Isa::kBaseline) / sizeof(T);  // every CPU has it (simd.h)
  const int64_t outer = InRowsOuter ? rows : cols, inner = InRowsOuter ? cols : rows;
  for (int64_t a = 0; a < outer; a += W)
    for (int64_t b = 0; b < inner; b += W) {
      const int64_t i = InRowsOuter ? a : b, j = InRowsOuter ? b : a;
      if (i + W <= rows && j + W <= cols) {
        transpose_block<T, W>(in + i * in_stride + j, in_stride, out + j * out_stride + i,
                              out_stride);
        continue;
      }
      for (int64_t ii = i; ii < std::min<int64_t>(i + W, rows); ++ii)
        for (int64_t jj = j; jj < std::min<int64_t>(j + W, cols); ++jj)
          out[jj * out_stride + ii] = in[ii * in_stride + jj];
    }
}

// Copies the images of `in` into `out` in layout To (from the other one),
// kCopyPixels pixels per task, transposed in blocks (see transpose).  The
// copy of one value at a time it replaces took 5% of the forward at 128^2
// (ours / ORT Conv 1.205 -> 1.155 in paired runs, AMD EPYC, AVX2).
template <Layout To, typename T>
void copy_layout(const T* in, const DeformConv2dParams& p, T* out,
                 const ParallelFor& parallel_for) {
  const int64_t plane = p.height * p.width, channels = p.in_channels;
  const int64_t blocks = ceil_div(plane, kCopyPixels);
  parallel_for(p.batch * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / blocks, q0 = task % blocks * kCopyPixels;
      const int64_t q1 = std::min(plane, q0 + kCopyPixels);
      const T* planar_in = in + n * channels * plane + q0;
      T* planar_out = out + n * channels * plane + q0;
      const int64_t last = n * (plane + 1) * channels + q0 * channels;
      if constexpr (To == Layout::kChannelsLast)
        transpose<true>(planar_in, plane, channels, q1 - q0, out + last, channels);
      else
        transpose<false>(in + last, channels, q1 - q0, channels, planar_out, plane);
      if (To == Layout::kChannelsLast && q1 == plane)
        std::fill_n(out + n * (plane + 1) * channels + plane * channels, channels, T{0});
    }
  });
}

}  // namespace deform_detail
}  // namespace customops
