// Multi-scale deformable attention, backward: the gradients with respect to
// value, sampling_locations and attention_weights, as mmcv's kernel computes
// them.
//
// Many queries sample the same pixel, so grad_value is a scatter: threads
// that split the queries would race on it.  Instead each (n, m) pair is one
// task: it alone writes grad_value[n, :, m, :] and the gradients of its
// samples, so no two threads touch one value and the sums run in one fixed
// order (the same bits for any thread count).  Deformable DETR has N * M =
// 8 or more such tasks per image, handed out one at a time (TaskQueue).
// Per sample, one pass over the D channels of the four corners gathers the
// three dot products with grad_output (the sampled value, and its
// derivatives along y and x) and scatters into the corners' gradient rows,
// W channels per vector (cpu/simd.h).
#include <algorithm>
#include <vector>

#include "cpu/simd.h"
#include "ms_deform_attn.h"
#include "ms_deform_attn_sampling.h"

namespace customops {
namespace {

using namespace ms_deform_attn_detail;

template <typename T>
struct Backward {
  const T* grad_output;
  const T* value;
  const Level* levels;
  const T* locations;
  const T* weights;
  MsDeformAttnParams p;
  T* grad_value;
  T* grad_locations;
  T* grad_weights;
};

// The gradients of the (n, m) pair `task`.  `zeros` is a row of D zeros that
// a corner outside reads, `sink` a row of D that its gradient goes to.
template <typename T, Isa I>
__attribute__((always_inline)) inline void backward_task(const Backward<T>& b, int64_t task,
                                                         const T* zeros, T* sink) {
  constexpr int W = vector_bytes(I) / sizeof(T);
  using V = Vec<T, W>;
  const MsDeformAttnParams& p = b.p;
  const int64_t n = task / p.heads, m = task % p.heads;
  const int64_t channels = p.channels, row_stride = p.heads * channels;
  const int64_t head = (n * p.spatial * p.heads + m) * channels;  // value[n, 0, m, 0]
  for (int64_t s = 0; s < p.spatial; ++s)
    std::fill_n(b.grad_value + head + s * row_stride, channels, T(0));
  for (int64_t q = 0; q < p.queries; ++q) {
    const int64_t nq = n * p.queries + q;
    const T* g = b.grad_output + (nq * p.heads + m) * channels;
    const int64_t first = (nq * p.heads + m) * p.levels * p.points;
    for (int64_t l = 0; l < p.levels; ++l) {
      const Level& level = b.levels[l];
      const int64_t start = head + level.start * row_stride;
      for (int64_t i = first + l * p.points; i < first + (l + 1) * p.points; ++i) {
        Sample<T> s;
        if (!sample_at(b.locations[2 * i], b.locations[2 * i + 1], level, s)) {
          b.grad_locations[2 * i] = b.grad_locations[2 * i + 1] = b.grad_weights[i] = T(0);
          continue;
        }
        const T a = b.weights[i];
        const T w[4] = {s.hh * s.hw, s.hh * s.lw, s.lh * s.hw, s.lh * s.lw};
        const T* c[4];
        T* gc[4];
        for (int k = 0; k < 4; ++k) {
          c[k] = s.row[k] >= 0 ? b.value + start + s.row[k] * row_stride : zeros;
          gc[k] = s.row[k] >= 0 ? b.grad_value + start + s.row[k] * row_stride : sink;
        }
        // sampled value, its derivatives along y (h) and x (w), dotted with g
        V val{}, dh{}, dw{};
        int64_t d = 0;
        for (; d + W <= channels; d += W) {
          V v0, v1, v2, v3, gv;
          load<T, W>(v0, c[0] + d), load<T, W>(v1, c[1] + d), load<T, W>(v2, c[2] + d);
          load<T, W>(v3, c[3] + d), load<T, W>(gv, g + d);
          val += gv * (w[0] * v0 + w[1] * v1 + w[2] * v2 + w[3] * v3);
          dh += gv * (s.hw * (v2 - v0) + s.lw * (v3 - v1));
          dw += gv * (s.hh * (v1 - v0) + s.lh * (v3 - v2));
          const V ag = a * gv;
          for (int k = 0; k < 4; ++k) {
            V gk;
            load<T, W>(gk, gc[k] + d);
            gk += w[k] * ag;
            store<T, W>(gc[k] + d, gk);
          }
        }
        T val_sum = reduce_add<T, W>(val), dh_sum = reduce_add<T, W>(dh),
          dw_sum = reduce_add<T, W>(dw);
        for (; d < channels; ++d) {
          const T v0 = c[0][d], v1 = c[1][d], v2 = c[2][d], v3 = c[3][d], gd = g[d];
          val_sum += gd * (w[0] * v0 + w[1] * v1 + w[2] * v2 + w[3] * v3);
          dh_sum += gd * (s.hw * (v2 - v0) + s.lw * (v3 - v1));
          dw_sum += gd * (s.hh * (v1 - v0) + s.lh * (v3 - v2));
          for (int k = 0; k < 4; ++k) gc[k][d] += w[k] * a * gd;
        }
        b.grad_weights[i] = val_sum;
        // pixel x = location x * width - 0.5: d pixel / d location = width
        b.grad_locations[2 * i] = static_cast<T>(level.width) * a * dw_sum;
        b.grad_locations[2 * i + 1] = static_cast<T>(level.height) * a * dh_sum;
      }
    }
  }
}

// Claims (n, m) tasks until none is left (see TaskQueue in parallel.h).
template <typename T, Isa I>
__attribute__((always_inline)) inline void run_tasks(const Backward<T>& b, TaskQueue& queue) {
  int64_t task = queue.claim();
  if (task < 0) return;
  const std::vector<T> zeros(b.p.channels, T(0));
  std::vector<T> sink(b.p.channels);
  for (; task >= 0; task = queue.claim()) backward_task<T, I>(b, task, zeros.data(), sink.data());
}

template <typename T>
__attribute__((flatten)) void tasks_baseline(const Backward<T>& b, TaskQueue& queue) {
  run_tasks<T, Isa::kBaseline>(b, queue);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
__attribute__((target("avx2,fma"), flatten)) void tasks_avx2(const Backward<T>& b,
                                                             TaskQueue& queue) {
  run_tasks<T, Isa::kAvx2>(b, queue);
}
#endif

template <typename T>
void backward(const T* grad_output, const T* value, const int64_t* spatial_shapes,
              const int64_t* level_start_index, const T* sampling_locations,
              const T* attention_weights, const MsDeformAttnParams& p, T* grad_value,
              T* grad_sampling_locations, T* grad_attention_weights,
              const ParallelFor& parallel_for) {
  check_finite_locations(sampling_locations, p, parallel_for);
  const std::vector<Level> levels = levels_of(p, spatial_shapes, level_start_index);
  const Backward<T> b{grad_output, value, levels.data(), sampling_locations, attention_weights,
                      p, grad_value, grad_sampling_locations, grad_attention_weights};
  void (*tasks)(const Backward<T>&, TaskQueue&) = tasks_baseline<T>;
#if defined(__x86_64__) || defined(__i386__)
  if (selected_isa() != Isa::kBaseline) tasks = tasks_avx2<T>;
#endif
  TaskQueue queue(p.batch * p.heads);
  parallel_for(queue.size(), 1, [&](int64_t, int64_t) { tasks(b, queue); });
}

}  // namespace

void ms_deform_attn_backward(const float* grad_output, const float* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const float* sampling_locations, const float* attention_weights,
                             const MsDeformAttnParams& p, float* grad_value,
                             float* grad_sampling_locations, float* grad_attention_weights,
                             const ParallelFor& parallel_for) {
  backward(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
           attention_weights, p, grad_value, grad_sampling_locations, grad_attention_weights,
           parallel_for);
}

void ms_deform_attn_backward(const double* grad_output, const double* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const double* sampling_locations, const double* attention_weights,
                             const MsDeformAttnParams& p, double* grad_value,
                             double* grad_sampling_locations, double* grad_attention_weights,
                             const ParallelFor& parallel_for) {
  backward(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
           attention_weights, p, grad_value, grad_sampling_locations, grad_attention_weights,
           parallel_for);
}

// float16: computed in float32, each gradient rounded once.
void ms_deform_attn_backward(const Half* grad_output, const Half* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const Half* sampling_locations, const Half* attention_weights,
                             const MsDeformAttnParams& p, Half* grad_value,
                             Half* grad_sampling_locations, Half* grad_attention_weights,
                             const ParallelFor& parallel_for) {
  const int64_t samples = p.batch * p.queries * p.heads * p.levels * p.points;
  const int64_t values = p.batch * p.spatial * p.heads * p.channels;
  const std::vector<float> dy = widened(grad_output, p.batch * p.queries * p.heads * p.channels),
                           v = widened(value, values), loc = widened(sampling_locations, 2 * samples),
                           a = widened(attention_weights, samples);
  std::vector<float> dv(values), dloc(2 * samples), da(samples);
  backward(dy.data(), v.data(), spatial_shapes, level_start_index, loc.data(), a.data(), p,
           dv.data(), dloc.data(), da.data(), parallel_for);
  narrow(dv, grad_value), narrow(dloc, grad_sampling_locations), narrow(da, grad_attention_weights);
}

}  // namespace customops
