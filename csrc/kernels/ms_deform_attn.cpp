// Multi-scale deformable attention, forward: one task per range of (n, q)
// queries, each writing its own output rows.
//
// value is (N, S, M, D), so the D channels of one head at one pixel are
// contiguous: a sample's four corners are four runs of D values, and the
// output row of (n, q, m) accumulates weight * run for each corner, with
// the attention weight folded into the four bilinear weights.  A corner
// outside its level reads a row of zeros instead of branching in the
// channel loop.  The sampling loop is compiled once per instruction set
// (cpu/simd.h), the channel loop vectorised by the compiler.
#include "ms_deform_attn.h"

#include <algorithm>
#include <atomic>

#include "cpu/simd.h"
#include "ms_deform_attn_sampling.h"

namespace customops {

using namespace ms_deform_attn_detail;

MsDeformAttnParams ms_deform_attn_check_shapes(const Shape& value,
                                               const Shape& spatial_shapes,
                                               const Shape& level_start_index,
                                               const Shape& sampling_locations,
                                               const Shape& attention_weights,
                                               int64_t im2col_step) {
  check(value.size() == 4, kOp, "value must be 4-D (N, S, M, D), got shape ", to_text(value));
  check(spatial_shapes.size() == 2 && spatial_shapes[1] == 2, kOp,
        "spatial_shapes must have shape (L, 2), got ", to_text(spatial_shapes));
  const int64_t n = value[0], heads = value[2], levels = spatial_shapes[0];
  const Shape index_shape{levels};
  check(level_start_index == index_shape, kOp, "level_start_index must have shape (L) = ",
        to_text(index_shape), ", got ", to_text(level_start_index));
  check(sampling_locations.size() == 6, kOp,
        "sampling_locations must be 6-D (N, Q, M, L, P, 2), got shape ",
        to_text(sampling_locations));
  const int64_t queries = sampling_locations[1], points = sampling_locations[4];
  const Shape locations_shape{n, queries, heads, levels, points, 2};
  check(sampling_locations == locations_shape, kOp,
        "sampling_locations must have shape (N, Q, M, L, P, 2) = ", to_text(locations_shape),
        " (N, M from value, L from spatial_shapes), got ", to_text(sampling_locations));
  const Shape weights_shape{n, queries, heads, levels, points};
  check(attention_weights == weights_shape, kOp,
        "attention_weights must have shape (N, Q, M, L, P) = ", to_text(weights_shape),
        ", got ", to_text(attention_weights));
  check(im2col_step >= 1, kOp, "im2col_step must be >= 1, got ", im2col_step);
  return {n, value[1], heads, value[3], queries, levels, points};
}

MsDeformAttnParams ms_deform_attn_check(const Shape& value, const Shape& spatial_shapes,
                                        const Shape& level_start_index,
                                        const Shape& sampling_locations,
                                        const Shape& attention_weights, int64_t im2col_step,
                                        const int64_t* spatial_shapes_data,
                                        const int64_t* level_start_index_data) {
  const MsDeformAttnParams p =
      ms_deform_attn_check_shapes(value, spatial_shapes, level_start_index, sampling_locations,
                                  attention_weights, im2col_step);
  int64_t total = 0;  // the areas so far, never above S
  for (int64_t l = 0; l < p.levels; ++l) {
    const int64_t height = spatial_shapes_data[2 * l], width = spatial_shapes_data[2 * l + 1];
    check(height >= 0 && width >= 0, kOp, "spatial_shapes must be >= 0, got spatial_shapes[",
          l, "] = (", height, ", ", width, ")");
    check(level_start_index_data[l] == total, kOp,
          "level_start_index must hold the prefix sums of the areas H * W of spatial_shapes, "
          "got level_start_index[", l, "] = ", level_start_index_data[l], ", expected ", total);
    int64_t area = 0;
    const bool overflow = __builtin_mul_overflow(height, width, &area) ||
                          __builtin_add_overflow(total, area, &total);
    check(!overflow && total <= p.spatial, kOp,
          "the areas H * W of spatial_shapes must sum to S = value.shape[1] = ", p.spatial,
          ", got more by level ", l, " (", height, ", ", width, ")");
  }
  check(total == p.spatial, kOp,
        "the areas H * W of spatial_shapes must sum to S = value.shape[1] = ", p.spatial,
        ", got ", total);
  return p;
}

namespace {

template <typename T>
struct Forward {
  const T* value;
  const Level* levels;
  const T* locations;
  const T* weights;
  MsDeformAttnParams p;
  T* output;
  std::atomic<bool>* non_finite;  // set when a range met a NaN or infinite location
};

// Output rows [begin, end) of (n * Q + q).  kChannels > 0 is D known at
// compile time (32 in Deformable DETR, DINO, RT-DETR: 256 channels over 8
// heads): the channel loop is then unrolled with its sums in registers
// across all samples of the row, stored once; with D only known at run
// time, the sums live in the output row.
template <typename T, int kChannels>
__attribute__((always_inline)) inline void forward_range(const Forward<T>& f, int64_t begin,
                                                         int64_t end) {
  const MsDeformAttnParams& p = f.p;
  const int64_t channels = kChannels > 0 ? kChannels : p.channels;
  const int64_t row_stride = p.heads * channels;
  const std::vector<T> zeros(channels, T(0));  // what a corner outside reads
  bool non_finite = false;
  for (int64_t nq = begin; nq < end; ++nq) {
    const int64_t n = nq / p.queries;
    for (int64_t m = 0; m < p.heads; ++m) {
      T* const row = f.output + (nq * p.heads + m) * channels;
      T registers[kChannels > 0 ? kChannels : 1] = {};
      T* __restrict out = kChannels > 0 ? registers : row;
      std::fill(out, out + channels, T(0));
      const int64_t first = (nq * p.heads + m) * p.levels * p.points;
      for (int64_t l = 0; l < p.levels; ++l) {
        const Level& level = f.levels[l];
        const T* base = f.value + ((n * p.spatial + level.start) * p.heads + m) * channels;
        for (int64_t i = first + l * p.points; i < first + (l + 1) * p.points; ++i) {
          const T x = f.locations[2 * i], y = f.locations[2 * i + 1];
          // x - x is 0 unless x is NaN or infinite (sample_at skips such a sample)
          non_finite |= !(x - x == T(0)) | !(y - y == T(0));
          Sample<T> s;
          if (!sample_at(x, y, level, s)) continue;
          const T a = f.weights[i];
          const T w0 = a * s.hh * s.hw, w1 = a * s.hh * s.lw, w2 = a * s.lh * s.hw,
                  w3 = a * s.lh * s.lw;
          const auto corner = [&](int k) {
            return s.row[k] >= 0 ? base + s.row[k] * row_stride : zeros.data();
          };
          const T *__restrict c0 = corner(0), *__restrict c1 = corner(1),
                              *__restrict c2 = corner(2), *__restrict c3 = corner(3);
          for (int64_t d = 0; d < channels; ++d)
            out[d] += w0 * c0[d] + w1 * c1[d] + w2 * c2[d] + w3 * c3[d];
        }
      }
      if (kChannels > 0) std::copy(out, out + channels, row);
    }
  }
  if (non_finite) f.non_finite->store(true, std::memory_order_relaxed);
}

template <typename T, int kChannels>
__attribute__((flatten)) void forward_baseline(const Forward<T>& f, int64_t begin, int64_t end) {
  forward_range<T, kChannels>(f, begin, end);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T, int kChannels>
__attribute__((target("avx2,fma"), flatten)) void forward_avx2(const Forward<T>& f,
                                                               int64_t begin, int64_t end) {
  forward_range<T, kChannels>(f, begin, end);
}
#endif

template <typename T>
void forward(const T* value, const int64_t* spatial_shapes, const int64_t* level_start_index,
             const T* sampling_locations, const T* attention_weights,
             const MsDeformAttnParams& p, T* output, const ParallelFor& parallel_for) {
  const std::vector<Level> levels = levels_of(p, spatial_shapes, level_start_index);
  // Non-finite locations are noticed in the sampling loop itself (a separate
  // pass would be one more parallel loop to wake the threads for), then
  // named by a serial search.
  std::atomic<bool> non_finite{false};
  const Forward<T> f{value, levels.data(), sampling_locations, attention_weights, p, output,
                     &non_finite};
  const bool d32 = p.channels == 32;
  void (*run)(const Forward<T>&, int64_t, int64_t) =
      d32 ? forward_baseline<T, 32> : forward_baseline<T, 0>;
#if defined(__x86_64__) || defined(__i386__)
  if (selected_isa() != Isa::kBaseline) run = d32 ? forward_avx2<T, 32> : forward_avx2<T, 0>;
#endif
  // A query costs M * L * P samples of 4 * D multiply-adds (16k on Deformable
  // DETR's encoder, a few microseconds): ranges of this many amortise a task.
  constexpr int64_t kGrain = 16;
  parallel_for(p.batch * p.queries, kGrain,
               [&](int64_t begin, int64_t end) { run(f, begin, end); });
  if (non_finite.load()) check_finite_locations(sampling_locations, p, serial_for);
}

}  // namespace

void ms_deform_attn(const float* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const float* sampling_locations,
                    const float* attention_weights, const MsDeformAttnParams& p, float* output,
                    const ParallelFor& parallel_for) {
  forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, p,
          output, parallel_for);
}

void ms_deform_attn(const double* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const double* sampling_locations,
                    const double* attention_weights, const MsDeformAttnParams& p,
                    double* output, const ParallelFor& parallel_for) {
  forward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, p,
          output, parallel_for);
}

void ms_deform_attn(const Half* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const Half* sampling_locations,
                    const Half* attention_weights, const MsDeformAttnParams& p, Half* output,
                    const ParallelFor& parallel_for) {
  const int64_t samples = p.batch * p.queries * p.heads * p.levels * p.points;
  const std::vector<float> v = widened(value, p.batch * p.spatial * p.heads * p.channels),
                           loc = widened(sampling_locations, 2 * samples),
                           a = widened(attention_weights, samples);
  std::vector<float> out(p.batch * p.queries * p.heads * p.channels);
  forward(v.data(), spatial_shapes, level_start_index, loc.data(), a.data(), p, out.data(),
          parallel_for);
  narrow(out, output);
}

}  // namespace customops
