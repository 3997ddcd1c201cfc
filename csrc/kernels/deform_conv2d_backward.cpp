// The backward of deform_conv2d, image by image, in three parallel phases
// that each own what they write, so no output is summed by racing threads
// and the result does not depend on the thread count:
//
//   A. per tile of output pixels (as in the forward): the column gradient
//      G = grad_output^T * W (one row of K = taps * C/groups values per
//      pixel and group, a GEMM as in gemm.h), then the bilinear samples of
//      every tap, which give in one pass over the channels
//      - the im2col columns (mask folded in) for the weight gradient,
//      - the four dot products sum_c G * corner_c, from which the offset
//        gradient (the derivative of the bilinear weights) and the mask
//        gradient (the bilinear value) of the pixel follow;
//      the sample's corners and weights are kept for phase B.
//   B. per block of input channels and range of input pixels: the input
//      gradient, G scattered onto the four corners of each sample (channels
//      last), each task adding only the corners in its own range.  Every
//      input pixel thus gets its terms in the order of a serial loop over
//      (band, tap, output pixel, corner), however the ranges are cut.
//   C. per panel of the weight gradient: grad_W += grad_output * columns,
//      summed over pixels in a fixed order and over images in order; and
//      the bias gradient.
//
// The image goes through the phases in bands of pixels, so the buffers (G,
// the columns, the corners) hold one band of one image: memory does not grow
// with the batch.  All of an image's bands run as one parallel loop of
// stages (StagedQueue in parallel.h): a band's A, then its B and C as one
// stage, then the next band's A.  The buffers are
// kept for the thread's next call (cpu/scratch.h).  Conventions
// follow torchvision's CPU backward, so that the gradients match it: a
// sample on the top or left border line (y or x == -1) takes the cell
// into the image for its offset gradient (see Edge in
// deform_conv2d_sampling.h), and samples outside, NaN or infinite offsets
// have zero gradients.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "deform_conv2d.h"
#include "deform_conv2d_sampling.h"
#include "cpu/gemm.h"
#include "cpu/scratch.h"
#include "profile.h"

namespace customops {
namespace {

using namespace deform_detail;

// Input channels per task of phase B (a run of whole vectors per corner).
constexpr int64_t kChannelBlock = 64;
// Ranges of input pixels per channel block in phase B (a task each).
// Each task reads all of the band's corners to pick its own, so more
// ranges cost more reading; they only need to balance the threads.
constexpr int64_t kScatterRanges = 2;
// Bytes of one B panel chunk in phase C: a chunk of pixels stays in L1/L2
// while the MR-row blocks of grad_output stream past it.
constexpr int64_t kPanelChunkBytes = 64 * 1024;
// Bytes of G per band of pixels, at most (the columns take as much again).
// Smaller bands keep G and the columns nearer the core; each band's phases
// are two stages of the image's loop (StagedQueue), each ending when its
// slowest task does.  Measured when each stage was a parallel loop of its
// own (passive waiting made a loop of 100 us of work take 158-310 us), step
// time paired against 4 MiB bands (128x128 and 64x64): 1 MiB 0.94x and
// 0.90x at 1 thread, 1.03x and 1.04x at 2; 2 MiB 0.90x and 0.95x at 1
// thread, 1.02x and 0.96x at 2; 8 MiB 1.06x and 0.99x, 16 MiB 1.07x and
// 1.08x at 2.  With the stages, 1 MiB and 512 KiB were no faster than
// 2 MiB in paired runs (AMD EPYC Zen 4, AVX-512).
constexpr int64_t kBandBytes = 2 << 20;

// One band: pixels [first, first + pixels) of an image, and phase B's
// input pixel ranges for it (range r: [bounds[r], bounds[r + 1])).
struct Band {
  int64_t first, pixels;
  std::array<uint32_t, kScatterRanges + 1> bounds;
};

// One step of an image's backward: a tile of phase A or a task of phase B
// or C (bc_tasks[index]) of one band.
struct Step {
  int64_t band;
  bool tile;
  int64_t index;
};

// What the phases of one image share: read-only, except the disjoint parts
// each task writes.
template <typename T>
struct Backward {
  const DeformConv2dParams& p;
  int64_t taps, group_channels, group_out, k, row_size, plane, sampled, og_channels;
  int64_t nr;             // panel width of both packed B's (GemmShape::NR)
  int64_t tile, band;     // pixels per tile, per band (a multiple of tile)
  const T* packed_weight;  // per group: W_g as B of G's GEMM (group_out x k, panels over k)
  int64_t packed_group;
  int64_t panels;          // panels of nr columns per group in the columns and grad_W
  int64_t column_group;    // values per group in `columns`
  const std::vector<std::pair<int64_t, int64_t>>& blocks;  // phase B: channel ranges
  const std::vector<int64_t>& bc_tasks;  // phase B task b as b, phase C task c as ~c
  const std::vector<Band>& bands;
  const std::vector<Step>& steps;  // an image's, in the order they are claimed
  // The current image:
  const T* image;      // channels last (H*W + 1, C), the last pixel zeros
  const T* grad_out;   // (O, plane)
  const T* offset;
  const T* mask;       // null without mask
  T* grad_offset;
  T* grad_mask;        // may be null
  // One band's buffers (row t: the band's pixel t):
  T* grad_rows;        // grad_output transposed: band rows of O
  T* grad_columns;     // G: band rows of row_size
  T* columns;          // per group: panels of nr columns over k, band rows each
  uint32_t* corner_pixel;  // [sampled][4][band]
  T* corner_weight;        // [sampled][4][band]
  T* grad_image;  // the image's input gradient, channels last (H*W + 1, C)
  // Summed over the images:
  T* grad_weight;  // (O, k), column kk = tap * C/groups + c
  T* grad_bias;    // (O)
};

// dst = sum of weight[q] * src[q] over n channels (the im2col values), and
// acc[q] / tail[q] += grad . src[q] (vector lanes, then the scalar tail).
template <typename T, int W>
__attribute__((always_inline)) inline void blend_dot(const T* const (&src)[4],
                                                     const T (&weight)[4], const T* grad,
                                                     int64_t n, T* __restrict dst,
                                                     Vec<T, W> (&acc)[4], T (&tail)[4]) {
  int64_t c = 0;
  for (; c + W <= n; c += W) {
    Vec<T, W> v[4], g;
    load<T, W>(g, grad + c);
    // Unrolled, so that v stays in registers: GCC 12 otherwise keeps v on
    // the stack, stores each vector there in two halves and reads it back
    // whole, a store-forwarding stall per load (the sampling of phase A
    // took twice as long).
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) load<T, W>(v[q], src[q] + c);
    store<T, W>(dst + c, weight[0] * v[0] + weight[1] * v[1] + weight[2] * v[2] +
                             weight[3] * v[3]);
    for (int q = 0; q < 4; ++q) acc[q] += g * v[q];
  }
  for (; c < n; ++c) {
    dst[c] = weight[0] * src[0][c] + weight[1] * src[1][c] + weight[2] * src[2][c] +
             weight[3] * src[3][c];
    for (int q = 0; q < 4; ++q) tail[q] += grad[c] * src[q][c];
  }
}

// dst[i][c] += w[i] * src[c] for c < n and i < count (count <= 4), each
// vector of src loaded once for all the destinations.
template <typename T, int W>
__attribute__((always_inline)) inline void axpy_corners(int count, const T (&w)[4],
                                                        const T* src, int64_t n,
                                                        T* const (&dst)[4]) {
  int64_t c = 0;
  for (; c + W <= n; c += W) {
    Vec<T, W> s;
    load<T, W>(s, src + c);
    for (int i = 0; i < count; ++i) {
      Vec<T, W> d;
      load<T, W>(d, dst[i] + c);
      store<T, W>(dst[i] + c, d + w[i] * s);
    }
  }
  for (; c < n; ++c)
    for (int i = 0; i < count; ++i) dst[i][c] += w[i] * src[c];
}

// A run of channels in phase A's gather: `size` channels from `channel`,
// their G values at `grad` in a row of G and their columns at `column`
// (plus the pixel's row times nr) in `columns`.
struct Run {
  int64_t channel, size, grad, column;
};

template <typename T, Isa I>
__attribute__((always_inline)) inline void run_tile(const Backward<T>& b, const Band& band,
                                                    int64_t task, SampleScratch<T>& s,
                                                    std::vector<Run>& runs) {
  using S = GemmShape<T, I>;
  constexpr int W = S::W;
  static_assert(W <= SampleScratch<T>::kMaxLanes, "sample_tap stores whole vectors");
  const DeformConv2dParams& p = b.p;
  const int64_t plane = b.plane, row0 = task * b.tile, first = band.first + row0;
  const int64_t pixels = std::min(b.tile, band.pixels - row0);
  const int64_t channels = p.in_channels, stride = s.stride;

  // G rows of the tile: grad_output^T (pixels x O/groups) times W_g.
  T* rows = b.grad_rows + row0 * p.out_channels;
  {
    PhaseTimer timer(Phase::kBackwardPack);
    transpose<true>(b.grad_out + first, plane, p.out_channels, pixels, rows, p.out_channels);
  }
  T* g_rows = b.grad_columns + row0 * b.row_size;
  {
    PhaseTimer timer(Phase::kBackwardGemmG, 2 * pixels * b.k * b.group_out * p.groups);
    for (int64_t g = 0; g < p.groups; ++g)
      gemm<T, I>(pixels, b.k, b.group_out, rows + g * b.group_out, p.out_channels,
                 b.packed_weight + g * b.packed_group, nullptr, g_rows + g * b.k,
                 b.row_size, 1);
  }

  T* pos_y = s.position.get();
  T* pos_x = pos_y + stride;
  for (int64_t t = 0; t < pixels; ++t) {
    pos_y[t] = static_cast<T>((first + t) / p.out_w * p.stride_h - p.pad_h);
    pos_x[t] = static_cast<T>((first + t) % p.out_w * p.stride_w - p.pad_w);
  }
  for (int64_t ch = 0; ch < b.sampled; ++ch) {
    const int64_t og = ch / b.taps, tap = ch % b.taps;
    const T* mask = b.mask ? b.mask + ch * plane + first : nullptr;
    PhaseTimer sample_timer(Phase::kBackwardSample);
    const int64_t left = plane - first;
    for (int64_t at : {2 * ch * plane + first, (2 * ch + 1) * plane + first}) {
      prefetch_next_tile<Access::kRead>(b.offset + at, b.tile, left);
      prefetch_next_tile<Access::kWrite>(b.grad_offset + at, b.tile, left);
    }
    if (mask) prefetch_next_tile<Access::kRead>(mask, b.tile, left);
    if (b.grad_mask)
      prefetch_next_tile<Access::kWrite>(b.grad_mask + ch * plane + first, b.tile, left);
    sample_tap<T, sample_lanes<T, W>(), Edge::kGradient>(
        pixels, pos_y, pos_x, static_cast<T>(tap / p.kernel_w * p.dilation_h),
        static_cast<T>(tap % p.kernel_w * p.dilation_w), b.offset + 2 * ch * plane + first,
        b.offset + (2 * ch + 1) * plane + first, mask, p.height, p.width, s.weight.get(),
        s.pixel.get(), stride, s.fraction.get());
    for (int q = 0; q < 4; ++q) {
      std::copy_n(s.pixel.get() + q * stride, pixels,
                  b.corner_pixel + (ch * 4 + q) * b.band + row0);
      std::copy_n(s.weight.get() + q * stride, pixels,
                  b.corner_weight + (ch * 4 + q) * b.band + row0);
    }
    sample_timer.stop();
    PhaseTimer gather_timer(Phase::kBackwardGather);
    // The offset group's channels as runs of one weight group, each cut
    // where the packed columns start a new panel: the same for every pixel.
    runs.clear();
    for (int64_t c = og * b.og_channels, og_end = c + b.og_channels; c < og_end;) {
      const int64_t g = c / b.group_channels;
      const int64_t run_end = std::min(og_end, (g + 1) * b.group_channels);
      for (int64_t kk = tap * b.group_channels + c - g * b.group_channels; c < run_end;) {
        const int64_t j = kk % b.nr, n = std::min(run_end - c, b.nr - j);
        runs.push_back({c, n, g * b.k + kk, g * b.column_group + kk / b.nr * b.band * b.nr + j});
        c += n, kk += n;
      }
    }
    for (int64_t t = 0; t < pixels; ++t) {
      const uint32_t* corner = s.pixel.get() + t;
      const T* wt = s.weight.get() + t;
      const T weight[4] = {wt[0], wt[stride], wt[2 * stride], wt[3 * stride]};
      Vec<T, W> acc[4] = {};
      T tail[4] = {};
      const T* grad_row = g_rows + t * b.row_size;
      T* column_row = b.columns + (row0 + t) * b.nr;
      for (const Run& run : runs) {
        const T* const src[4] = {b.image + int64_t{corner[0]} * channels + run.channel,
                                 b.image + int64_t{corner[stride]} * channels + run.channel,
                                 b.image + int64_t{corner[2 * stride]} * channels + run.channel,
                                 b.image + int64_t{corner[3 * stride]} * channels + run.channel};
        blend_dot<T, W>(src, weight, grad_row + run.grad, run.size, column_row + run.column, acc,
                        tail);
      }
      T dot[4];
      for (int q = 0; q < 4; ++q) dot[q] = tail[q] + reduce_add<T, W>(acc[q]);
      const T ly = s.fraction[t], lx = s.fraction[stride + t], hy = 1 - ly, hx = 1 - lx;
      const T m = mask ? mask[t] : T{1};
      // d(sample)/dy and d(sample)/dx of the bilinear interpolation.
      b.grad_offset[2 * ch * plane + first + t] =
          m * (hx * (dot[2] - dot[0]) + lx * (dot[3] - dot[1]));
      b.grad_offset[(2 * ch + 1) * plane + first + t] =
          m * (hy * (dot[1] - dot[0]) + ly * (dot[3] - dot[2]));
      if (b.grad_mask)
        b.grad_mask[ch * plane + first + t] =
            hy * hx * dot[0] + hy * lx * dot[1] + ly * hx * dot[2] + ly * lx * dot[3];
    }
  }
}

// Phase B: the input gradient of one block of channels (one offset group,
// one weight group) at one range of input pixels, from the band's samples
// tap by tap, pixel by pixel.
template <typename T, Isa I>
__attribute__((always_inline)) inline void scatter_block(const Backward<T>& b, const Band& band,
                                                         int64_t task) {
  constexpr int W = GemmShape<T, I>::W;
  const int64_t range = task % kScatterRanges;
  const auto [c0, c1] = b.blocks[task / kScatterRanges];
  const int64_t n = c1 - c0, channels = b.p.in_channels;
  const int64_t og = c0 / b.og_channels, g = c0 / b.group_channels;
  const uint32_t lo = band.bounds[range], size = band.bounds[range + 1] - lo;
  PhaseTimer timer(Phase::kBackwardScatter);
  for (int64_t tap = 0; tap < b.taps; ++tap) {
    const int64_t ch = og * b.taps + tap;
    const T* grad = b.grad_columns + g * b.k + tap * b.group_channels + c0 - g * b.group_channels;
    for (int64_t t = 0; t < band.pixels; ++t, grad += b.row_size) {
      // The sample's corners in this task's range, in corner order.
      // Corners outside (weight 0, the zero pixel) are skipped, as in
      // torchvision's col2im.
      T w[4];
      T* dst[4];
      int count = 0;
      for (int q = 0; q < 4; ++q) {
        const int64_t at = (ch * 4 + q) * b.band + t;
        const uint32_t pixel = b.corner_pixel[at];
        if (pixel - lo < size && b.corner_weight[at] != 0) {
          w[count] = b.corner_weight[at];
          dst[count++] = b.grad_image + int64_t{pixel} * channels + c0;
        }
      }
      axpy_corners<T, W>(count, w, grad, n, dst);
    }
  }
}

// Phase C: one panel of nr columns of grad_W for one group, plus (with the
// group's first panel) the group's bias gradient.
template <typename T, Isa I>
__attribute__((always_inline)) inline void weight_panel(const Backward<T>& b, const Band& band,
                                                        int64_t task) {
  using S = GemmShape<T, I>;
  const int64_t g = task / b.panels, panel = task % b.panels;
  const int64_t j0 = panel * S::NR, cols = std::min<int64_t>(S::NR, b.k - j0);
  const T* packed = b.columns + g * b.column_group + panel * b.band * S::NR;
  const int64_t chunk = std::max<int64_t>(1, kPanelChunkBytes / (S::NR * int64_t{sizeof(T)}));
  // Rows of grad_W per micro-kernel call: with AVX-512, 8 instead of 12,
  // which leave 8 of the last call's 12 rows idle at O/groups = 64
  // (5 * 12 + 4); 64 is 8 * 8.
  constexpr int MR = I == Isa::kAvx512 ? 8 : S::MR;
  PhaseTimer timer(Phase::kBackwardGemmW, 2 * b.group_out * band.pixels * cols);
  for (int64_t p0 = 0; p0 < band.pixels; p0 += chunk) {
    const int64_t kc = std::min(chunk, band.pixels - p0);
    for (int64_t i0 = 0; i0 < b.group_out; i0 += MR) {
      const int64_t rows = std::min<int64_t>(MR, b.group_out - i0);
      T tile[MR * S::NR];
      // A is grad_output's rows i0.. read down the columns of grad_rows
      // (O values apart): read along grad_output's rows instead, MR rows
      // 4 KiB-multiples apart share L1 sets and the GEMM ran 15% slower.
      gemm_micro_kernel<T, MR, S::NV, S::W>(
          kc, b.grad_rows + p0 * b.p.out_channels + g * b.group_out + i0, 1, rows,
          packed + p0 * S::NR, nullptr, tile, b.p.out_channels);
      T* dst = b.grad_weight + (g * b.group_out + i0) * b.k + j0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dst[i * b.k + j] += tile[i * S::NR + j];
    }
  }
  if (panel != 0) return;
  const T* grad = b.grad_out + g * b.group_out * b.plane + band.first;
  for (int64_t o = 0; o < b.group_out; ++o) {
    const T* row = grad + o * b.plane;
    Vec<T, S::W> acc = {};
    int64_t t = 0;
    for (; t + S::W <= band.pixels; t += S::W) {
      Vec<T, S::W> v;
      load<T, S::W>(v, row + t);
      acc += v;
    }
    T sum = 0;
    for (int i = 0; i < S::W; ++i) sum += acc[i];
    for (; t < band.pixels; ++t) sum += row[t];
    b.grad_bias[g * b.group_out + o] += sum;
  }
}

// Claims an image's steps until none is left.
template <typename T, Isa I>
__attribute__((always_inline)) inline void run_steps(const Backward<T>& b, StagedQueue& queue) {
  // Allocated before the first claim: a task this thread claimed and never
  // finished (a failed allocation) would leave the other threads waiting.
  SampleScratch<T> scratch(b.tile);
  std::vector<Run> runs;
  runs.reserve(b.og_channels + 1);  // at most one run per channel
  for (int64_t i; (i = queue.claim()) >= 0; queue.finish()) {
    const Step& step = b.steps[i];
    const Band& band = b.bands[step.band];
    if (step.tile) {
      run_tile<T, I>(b, band, step.index, scratch, runs);
    } else if (const int64_t task = b.bc_tasks[step.index]; task >= 0) {
      scatter_block<T, I>(b, band, task);
    } else {
      weight_panel<T, I>(b, band, ~task);
    }
  }
}

// The step loop compiled once per instruction set.
template <typename T>
using Steps = void (*)(const Backward<T>&, StagedQueue&);

template <typename T>
void steps_baseline(const Backward<T>& b, StagedQueue& queue) {
  run_steps<T, Isa::kBaseline>(b, queue);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
__attribute__((target("avx2,fma"))) void steps_avx2(const Backward<T>& b, StagedQueue& queue) {
  run_steps<T, Isa::kAvx2>(b, queue);
}
template <typename T>
__attribute__((target("avx512f"))) void steps_avx512(const Backward<T>& b, StagedQueue& queue) {
  run_steps<T, Isa::kAvx512>(b, queue);
}
#endif

// Phase B's channel blocks: runs inside one offset group and one weight
// group, at most kChannelBlock channels each.
std::vector<std::pair<int64_t, int64_t>> channel_blocks(const DeformConv2dParams& p) {
  const int64_t og_channels = p.in_channels / p.offset_groups;
  const int64_t group_channels = p.in_channels / p.groups;
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (int64_t c = 0; c < p.in_channels;) {
    const int64_t end = std::min({c + kChannelBlock, (c / og_channels + 1) * og_channels,
                                  (c / group_channels + 1) * group_channels});
    blocks.emplace_back(c, end);
    c = end;
  }
  return blocks;
}

// A band with phase B's ranges: the input pixels up to the kernel centres
// of equal shares of the band's output pixels, where the samples cluster,
// so that the ranges get similar numbers of corners (the first and last are
// open-ended, for samples far off).
Band make_band(const DeformConv2dParams& p, int64_t first, int64_t pixels) {
  const int64_t image_plane = p.height * p.width;
  Band band{first, pixels, {}};
  band.bounds[0] = 0;
  for (int64_t r = 1; r < kScatterRanges; ++r) {
    const int64_t t = first + pixels * r / kScatterRanges;
    const int64_t y = t / p.out_w * p.stride_h - p.pad_h + (p.kernel_h - 1) * p.dilation_h / 2;
    const int64_t x = t % p.out_w * p.stride_w - p.pad_w + (p.kernel_w - 1) * p.dilation_w / 2;
    // Clamped and kept nondecreasing, so the ranges stay disjoint.
    const int64_t at = std::clamp<int64_t>(y * p.width + x, band.bounds[r - 1], image_plane);
    band.bounds[r] = static_cast<uint32_t>(at);
  }
  band.bounds[kScatterRanges] = static_cast<uint32_t>(image_plane + 1);  // the zero pixel too
  return band;
}

// Phases B and C as one list, each kind spread evenly over it, so that the
// few long scatter tasks do not all come last in the order the threads
// claim them in.
std::vector<int64_t> interleaved(int64_t blocks, int64_t panels) {
  std::vector<int64_t> tasks;
  for (int64_t i = 0, j = 0; i < blocks || j < panels;) {
    // Take the kind that is further behind its share of the list.
    if (j >= panels || (i < blocks && (2 * i + 1) * panels <= (2 * j + 1) * blocks))
      tasks.push_back(i++);
    else
      tasks.push_back(~j++);
  }
  return tasks;
}

template <typename T, Isa I>
void run(const T* grad_output, const T* input, const T* weight, const T* offset, const T* mask,
         const DeformConv2dParams& p, T* grad_input, T* grad_weight, T* grad_offset,
         T* grad_mask, T* grad_bias, const ParallelFor& parallel_for, Steps<T> run_steps) {
  using S = GemmShape<T, I>;
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t group_channels = p.in_channels / p.groups;
  const int64_t group_out = p.out_channels / p.groups;
  const int64_t k = group_channels * taps, row_size = p.groups * k;
  const int64_t plane = p.out_h * p.out_w, image_plane = p.height * p.width;
  const int64_t sampled = p.offset_groups * taps;

  // B of G's GEMM for group g: row o, column kk = tap * C/groups + c is
  // weight[g * O/groups + o][c][tap]; zeros past k.
  const int64_t packed_group = gemm_packed_size(k, group_out, S::NR);
  const AlignedArray<T> packed_weight = aligned_array<T>(p.groups * packed_group);
  T* packed = packed_weight.get();
  PhaseTimer pack_timer(Phase::kBackwardPack);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t j0 = 0; j0 < k; j0 += S::NR) {
      int64_t column[S::NR];  // of weight[o], for kk = j0 + j (-1: padding)
      for (int64_t j = 0; j < S::NR; ++j)
        column[j] = j0 + j < k ? (j0 + j) % group_channels * taps + (j0 + j) / group_channels
                               : -1;
      for (int64_t o = 0; o < group_out; ++o) {
        const T* row = weight + (g * group_out + o) * group_channels * taps;
        for (int64_t j = 0; j < S::NR; ++j) *packed++ = column[j] >= 0 ? row[column[j]] : T{0};
      }
    }
  pack_timer.stop();

  DeformConv2dParams one_image = p;
  one_image.batch = 1;  // tiles and the layout copies: one image at a time
  const int64_t row_bytes = row_size * int64_t{sizeof(T)};
  const int64_t tile = tile_pixels(one_image, row_bytes, tile_unit<T>(S::MR));
  // Bands of at most kBandBytes of G (or one tile), all but the last of
  // one size, a whole number of tiles.
  const int64_t band_limit = std::max<int64_t>(1, kBandBytes / row_bytes / tile) * tile;
  const int64_t band_count = ceil_div(plane, band_limit);
  const int64_t band = round_up(ceil_div(plane, band_count), tile);
  const int64_t panels = ceil_div(k, S::NR);
  const int64_t column_group = gemm_packed_size(k, band, S::NR);
  const auto blocks = channel_blocks(p);
  const int64_t block_count = static_cast<int64_t>(blocks.size());
  const auto bc_tasks = interleaved(block_count * kScatterRanges, p.groups * panels);
  // An image's steps, band by band: the band's tiles (phase A), then its
  // phase B and C tasks, each a stage that waits for the one before (the
  // band's buffers are shared).  The same list for every image.
  std::vector<Band> bands;
  std::vector<Step> steps;
  std::vector<int64_t> ready;  // per step: the first step of its stage
  for (int64_t first = 0; first < plane; first += band) {
    bands.push_back(make_band(p, first, std::min(band, plane - first)));
    const int64_t index = static_cast<int64_t>(bands.size()) - 1;
    const int64_t tiles = ceil_div(bands.back().pixels, tile);
    for (int64_t stage = 0; stage < 2; ++stage) {
      const int64_t start = static_cast<int64_t>(steps.size());
      const int64_t count = stage == 0 ? tiles : static_cast<int64_t>(bc_tasks.size());
      for (int64_t i = 0; i < count; ++i) {
        steps.push_back({index, stage == 0, i});
        ready.push_back(start);
      }
    }
  }

  // Uninitialized (a previous call's values) where every value read is
  // written first.
  Scratch scratch;
  T* image = scratch.array<T>((image_plane + 1) * p.in_channels);
  T* grad_rows = scratch.array<T>(band * p.out_channels);
  T* grad_columns = scratch.array<T>(band * row_size);
  T* columns = scratch.array<T>(p.groups * column_group);
  // The padding columns of each group's last panel are never written; the
  // GEMM's results for them are discarded, but zeros keep them defined.
  if (k % S::NR)
    for (int64_t g = 0; g < p.groups; ++g)
      std::fill_n(columns + g * column_group + (panels - 1) * band * S::NR, band * S::NR, T{0});
  uint32_t* corner_pixel = scratch.array<uint32_t>(sampled * 4 * band);
  T* corner_weight = scratch.array<T>(sampled * 4 * band);
  T* grad_image = scratch.array<T>((image_plane + 1) * p.in_channels);
  std::vector<T> weight_sum(p.out_channels * k, T{0}), bias_sum(p.out_channels, T{0});

  Backward<T> b{p, taps, group_channels, group_out, k, row_size, plane, sampled,
                p.in_channels / p.offset_groups, S::NR, tile, band,
                packed_weight.get(), packed_group, panels, column_group, blocks, bc_tasks,
                bands, steps, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                grad_rows, grad_columns, columns, corner_pixel, corner_weight, grad_image,
                weight_sum.data(), bias_sum.data()};
  const int64_t offset_size = 2 * sampled * plane;
  for (int64_t n = 0; n < p.batch; ++n) {
    PhaseTimer copy_timer(Phase::kBackwardCopy);
    copy_layout<Layout::kChannelsLast>(input + n * p.in_channels * image_plane, one_image,
                                       image, parallel_for);
    copy_timer.stop();
    b.image = image;
    b.grad_out = grad_output + n * p.out_channels * plane;
    b.offset = offset + n * offset_size;
    b.mask = mask ? mask + n * sampled * plane : nullptr;
    b.grad_offset = grad_offset + n * offset_size;
    b.grad_mask = grad_mask ? grad_mask + n * sampled * plane : nullptr;
    PhaseTimer zero_timer(Phase::kBackwardZero);
    parallel_for(ceil_div(image_plane + 1, kCopyPixels), 1, [&](int64_t begin, int64_t end) {
      std::fill(grad_image + begin * kCopyPixels * p.in_channels,
                grad_image + std::min(image_plane + 1, end * kCopyPixels) * p.in_channels, T{0});
    });
    zero_timer.stop();
    {
      StagedQueue queue(ready);
      PhaseTimer timer(Phase::kBackwardLoop);
      parallel_for(queue.size(), 1, [&](int64_t, int64_t) { run_steps(b, queue); });
    }
    PhaseTimer copy_back_timer(Phase::kBackwardCopy);
    copy_layout<Layout::kPlanar>(grad_image, one_image,
                                 grad_input + n * p.in_channels * image_plane, parallel_for);
  }
  PhaseTimer unpack_timer(Phase::kBackwardPack);
  for (int64_t o = 0; o < p.out_channels; ++o) {
    const T* sum = weight_sum.data() + o * k;  // column kk = tap * C/groups + c
    for (int64_t tap = 0; tap < taps; ++tap)
      for (int64_t c = 0; c < group_channels; ++c)
        grad_weight[(o * group_channels + c) * taps + tap] = sum[tap * group_channels + c];
    grad_bias[o] = bias_sum[o];
  }
}

template <typename T>
void run_best(const T* grad_output, const T* input, const T* weight, const T* offset,
              const T* mask, const DeformConv2dParams& p, T* grad_input, T* grad_weight,
              T* grad_offset, T* grad_mask, T* grad_bias, const ParallelFor& parallel_for) {
  if (p.batch == 0) {  // only the weight and bias gradients have values: zeros
    std::fill_n(grad_weight, p.out_channels * p.in_channels / p.groups * p.kernel_h * p.kernel_w,
                T{0});
    std::fill_n(grad_bias, p.out_channels, T{0});
    return;
  }
  switch (selected_isa()) {
#if defined(__x86_64__) || defined(__i386__)
    case Isa::kAvx512:
      return run<T, Isa::kAvx512>(grad_output, input, weight, offset, mask, p, grad_input,
                                  grad_weight, grad_offset, grad_mask, grad_bias, parallel_for,
                                  steps_avx512<T>);
    case Isa::kAvx2:
      return run<T, Isa::kAvx2>(grad_output, input, weight, offset, mask, p, grad_input,
                                grad_weight, grad_offset, grad_mask, grad_bias, parallel_for,
                                steps_avx2<T>);
#endif
    default:
      return run<T, Isa::kBaseline>(grad_output, input, weight, offset, mask, p, grad_input,
                                    grad_weight, grad_offset, grad_mask, grad_bias,
                                    parallel_for, steps_baseline<T>);
  }
}

// `count` halves as floats (empty for an absent input).
std::vector<float> widened(const Half* values, int64_t count) {
  std::vector<float> out(values ? count : 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = to_float(values[i]);
  return out;
}

void narrow(const std::vector<float>& values, Half* out) {
  if (out)
    for (size_t i = 0; i < values.size(); ++i) out[i] = to_half(values[i]);
}

}  // namespace

void deform_conv2d_backward(const float* grad_output, const float* input, const float* weight,
                            const float* offset, const float* mask, const DeformConv2dParams& p,
                            float* grad_input, float* grad_weight, float* grad_offset,
                            float* grad_mask, float* grad_bias, const ParallelFor& parallel_for) {
  run_best(grad_output, input, weight, offset, mask, p, grad_input, grad_weight, grad_offset,
           grad_mask, grad_bias, parallel_for);
}

void deform_conv2d_backward(const double* grad_output, const double* input,
                            const double* weight, const double* offset, const double* mask,
                            const DeformConv2dParams& p, double* grad_input,
                            double* grad_weight, double* grad_offset, double* grad_mask,
                            double* grad_bias, const ParallelFor& parallel_for) {
  run_best(grad_output, input, weight, offset, mask, p, grad_input, grad_weight, grad_offset,
           grad_mask, grad_bias, parallel_for);
}

// float16: computed in float32, each gradient rounded once.
void deform_conv2d_backward(const Half* grad_output, const Half* input, const Half* weight,
                            const Half* offset, const Half* mask, const DeformConv2dParams& p,
                            Half* grad_input, Half* grad_weight, Half* grad_offset,
                            Half* grad_mask, Half* grad_bias, const ParallelFor& parallel_for) {
  const int64_t taps = p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  const int64_t input_size = p.batch * p.in_channels * p.height * p.width;
  const int64_t weight_size = p.out_channels * p.in_channels / p.groups * taps;
  const int64_t offset_size = p.batch * 2 * p.offset_groups * taps * plane;
  const int64_t mask_size = p.batch * p.offset_groups * taps * plane;
  const std::vector<float> dy = widened(grad_output, p.batch * p.out_channels * plane),
                           x = widened(input, input_size), w = widened(weight, weight_size),
                           o = widened(offset, offset_size), m = widened(mask, mask_size);
  std::vector<float> dx(input_size), dw(weight_size), doff(offset_size),
      dm(grad_mask ? mask_size : 0), db(p.out_channels);
  run_best(dy.data(), x.data(), w.data(), o.data(), mask ? m.data() : nullptr, p, dx.data(),
           dw.data(), doff.data(), grad_mask ? dm.data() : nullptr, db.data(), parallel_for);
  narrow(dx, grad_input), narrow(dw, grad_weight), narrow(doff, grad_offset);
  narrow(dm, grad_mask), narrow(db, grad_bias);
}

}  // namespace customops
