// Deformable convolution as bilinear sampling into im2col rows, tile by
// tile, each tile followed by a GEMM with the packed weights.
//
// The input is first copied channels-last (N, H*W, C).  The four corners of
// a sample are then four contiguous runs of channels, and one sample fills a
// run of its im2col row with vector loads and multiply-adds, W channels at a
// time, instead of four scattered scalar loads per value.  Each output pixel
// owns one im2col row, which is one row of A in gemm.h (K ordered tap-major:
// kk = tap * C/groups + c); the weights are B, packed once per call in the
// same order, and the GEMM writes the NCHW output directly.  Tiles of output
// pixels keep their im2col rows in L2; (image, tile) pairs are the tasks,
// handed out one at a time (TaskQueue, parallel.h) so that a thread that
// starts late takes fewer.  The tile loop is compiled once per instruction
// set (simd.h).
#include "deform_conv2d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/scratch.h"
#include "deform_conv2d_sampling.h"
#include "profile.h"

namespace customops {
namespace {

using namespace deform_detail;

constexpr const char* kOp = "deform_conv2d";

// Limits that keep every size product in int64 (and size_t) range.
constexpr int64_t kMaxValue = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxElements = int64_t{1} << 60;

// Checks that no entry of `values` exceeds kMaxValue, so sums and products
// of a few of them cannot overflow.
void check_not_huge(const Shape& values, const char* name) {
  for (int64_t v : values)
    check(v <= kMaxValue, kOp, name, " values must be at most ", kMaxValue,
          ", got ", to_text(values));
}

// Element count of `shape`, rejecting products above kMaxElements.
int64_t checked_count(const Shape& shape, const char* name) {
  int64_t count = 1;
  for (int64_t d : shape) {
    const bool overflow = __builtin_mul_overflow(count, d, &count);
    check(!overflow && count <= kMaxElements, kOp, name,
          " has too many elements (limit 2^60), shape ", to_text(shape));
  }
  return count;
}

void check_shape(const Shape& given, const Shape& expected, const char* name,
                 const char* layout) {
  check(given == expected, kOp, name, " must have shape ", layout, " = ",
        to_text(expected), ", got ", to_text(given));
}

// Output size along one axis, after checking the dilated kernel fits.
int64_t output_size(int64_t in, int64_t pad, int64_t kernel, int64_t stride,
                    int64_t dilation, const char* axis) {
  const int64_t padded = in + 2 * pad;
  const int64_t extent = dilation * (kernel - 1) + 1;
  check(extent <= padded, kOp, "kernel ", axis, " extent ", extent,
        " (dilation * (k - 1) + 1) must fit in the padded input ", axis, " ",
        padded, " (", axis, " + 2 * padding)");
  return (padded - extent) / stride + 1;
}

// What the tiles of one call share (read-only, except disjoint output).
template <typename T>
struct Call {
  const DeformConv2dParams& p;
  const T* input;          // channels last: (batch, H*W + 1, C), the last pixel zeros
  const T* offset;
  const T* mask;           // null without mask
  const T* packed_weight;  // per group: B of the GEMM, k x (O/groups)
  const T* packed_bias;    // per group, padded to whole panels; null without bias
  T* output;
  int64_t taps, group_channels, group_out, k, packed_group, padded_group_out;
  int64_t row_size;  // im2col row: groups * k values
  int64_t tile, tiles;
};

// Scratch of one thread: a tile's im2col rows and one tap's samples.
template <typename T>
struct TileScratch : SampleScratch<T> {
  explicit TileScratch(const Call<T>& call)
      : SampleScratch<T>(call.tile), columns(aligned_array<T>(call.tile * call.row_size)) {}
  // Left uninitialized: sampling writes every value the GEMM reads.
  AlignedArray<T> columns;
};

// dst[c] = sum of weight[q] * src[q][c] for c < n, W channels at a time.
template <typename T, int W>
__attribute__((always_inline)) inline void blend(const T* const (&src)[4], const T (&weight)[4],
                                                 int64_t n, T* __restrict dst) {
  int64_t c = 0;
  for (; c + W <= n; c += W) {
    Vec<T, W> v0, v1, v2, v3;
    load<T, W>(v0, src[0] + c), load<T, W>(v1, src[1] + c);
    load<T, W>(v2, src[2] + c), load<T, W>(v3, src[3] + c);
    store<T, W>(dst + c, weight[0] * v0 + weight[1] * v1 + weight[2] * v2 + weight[3] * v3);
  }
  for (; c < n; ++c)
    dst[c] = weight[0] * src[0][c] + weight[1] * src[1][c] + weight[2] * src[2][c] +
             weight[3] * src[3][c];
}

// Samples the im2col rows of one tile, tap by tap, then multiplies them by
// each group's weights into the output.
template <typename T, Isa I>
__attribute__((always_inline)) inline void run_tile(const Call<T>& call, int64_t task,
                                                    TileScratch<T>& scratch) {
  const DeformConv2dParams& p = call.p;
  const int64_t out_plane = p.out_h * p.out_w;
  const int64_t n = task / call.tiles, first = task % call.tiles * call.tile;
  const int64_t pixels = std::min(call.tile, out_plane - first);
  const T* image = call.input + n * (p.height * p.width + 1) * p.in_channels;
  const int64_t sampled = p.offset_groups * call.taps;  // (offset group, tap) pairs
  const T* offset = call.offset + n * 2 * sampled * out_plane + first;
  const T* mask = call.mask ? call.mask + n * sampled * out_plane + first : nullptr;
  const int64_t og_channels = p.in_channels / p.offset_groups;
  static_assert(GemmShape<T, I>::W <= SampleScratch<T>::kMaxLanes,
                "sample_tap stores whole vectors");
  const int64_t stride = scratch.stride;
  T* pos_y = scratch.position.get();
  T* pos_x = pos_y + stride;
  for (int64_t t = 0; t < pixels; ++t) {
    pos_y[t] = static_cast<T>((first + t) / p.out_w * p.stride_h - p.pad_h);
    pos_x[t] = static_cast<T>((first + t) % p.out_w * p.stride_w - p.pad_w);
  }
  for (int64_t ch = 0; ch < sampled; ++ch) {
    const int64_t og = ch / call.taps, tap = ch % call.taps;
    PhaseTimer sample_timer(Phase::kForwardSample);
    const int64_t left = out_plane - first;
    for (int64_t plane : {2 * ch, 2 * ch + 1})
      prefetch_next_tile<Access::kRead>(offset + plane * out_plane, call.tile, left);
    if (mask) prefetch_next_tile<Access::kRead>(mask + ch * out_plane, call.tile, left);
    sample_tap<T, sample_lanes<T, GemmShape<T, I>::W>()>(
        pixels, pos_y, pos_x, static_cast<T>(tap / p.kernel_w * p.dilation_h),
        static_cast<T>(tap % p.kernel_w * p.dilation_w), offset + 2 * ch * out_plane,
        offset + (2 * ch + 1) * out_plane, mask ? mask + ch * out_plane : nullptr, p.height,
        p.width, scratch.weight.get(), scratch.pixel.get(), stride);
    sample_timer.stop();
    PhaseTimer gather_timer(Phase::kForwardGather);
    // The offset group's channels, run by run of one weight group each.
    const int64_t og_end = (og + 1) * og_channels;
    for (int64_t c = og * og_channels; c < og_end;) {
      const int64_t g = c / call.group_channels;
      const int64_t run_end = std::min(og_end, (g + 1) * call.group_channels);
      T* column = scratch.columns.get() + g * call.k + tap * call.group_channels +
                  (c - g * call.group_channels);
      for (int64_t t = 0; t < pixels; ++t, column += call.row_size) {
        const uint32_t* corner = scratch.pixel.get() + t;
        const T* const src[4] = {image + int64_t{corner[0]} * p.in_channels + c,
                                 image + int64_t{corner[stride]} * p.in_channels + c,
                                 image + int64_t{corner[2 * stride]} * p.in_channels + c,
                                 image + int64_t{corner[3 * stride]} * p.in_channels + c};
        const T* wt = scratch.weight.get() + t;
        const T weight[4] = {wt[0], wt[stride], wt[2 * stride], wt[3 * stride]};
        blend<T, GemmShape<T, I>::W>(src, weight, run_end - c, column);
      }
      c = run_end;
    }
  }
  PhaseTimer timer(Phase::kForwardGemm, 2 * pixels * call.group_out * call.k * p.groups);
  for (int64_t g = 0; g < p.groups; ++g)
    gemm<T, I>(pixels, call.group_out, call.k, scratch.columns.get() + g * call.k,
               call.row_size, call.packed_weight + g * call.packed_group,
               call.packed_bias ? call.packed_bias + g * call.padded_group_out : nullptr,
               call.output + (n * p.out_channels + g * call.group_out) * out_plane + first, 1,
               out_plane);
}

// Claims tiles until none is left (see TaskQueue in parallel.h).
template <typename T, Isa I>
__attribute__((always_inline)) inline void run_tiles(const Call<T>& call, TaskQueue& queue) {
  int64_t task = queue.claim();
  if (task < 0) return;  // before allocating: ORT may call with nothing left
  // Scratch per call of the body, so concurrent calls and threads never share it.
  TileScratch<T> scratch(call);
  for (; task >= 0; task = queue.claim()) run_tile<T, I>(call, task, scratch);
}

// One compiled copy of the tile loop per instruction set.
template <typename T>
void tiles_baseline(const Call<T>& call, TaskQueue& queue) {
  run_tiles<T, Isa::kBaseline>(call, queue);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
__attribute__((target("avx2,fma"))) void tiles_avx2(const Call<T>& call, TaskQueue& queue) {
  run_tiles<T, Isa::kAvx2>(call, queue);
}

template <typename T>
__attribute__((target("avx512f"))) void tiles_avx512(const Call<T>& call, TaskQueue& queue) {
  run_tiles<T, Isa::kAvx512>(call, queue);
}
#endif

template <typename T, Isa I>
void run(const T* input, const T* weight, const T* offset, const T* mask, const T* bias,
         const DeformConv2dParams& p, T* output, const ParallelFor& parallel_for,
         void (*tiles)(const Call<T>&, TaskQueue&)) {
  using S = GemmShape<T, I>;
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t group_channels = p.in_channels / p.groups;
  const int64_t group_out = p.out_channels / p.groups;
  const int64_t k = group_channels * taps;
  const int64_t packed_group = gemm_packed_size(group_out, k, S::NR);
  const int64_t padded_group_out = gemm_packed_size(group_out, 1, S::NR);

  // B of group g: row kk = tap * C/groups + c, column o is
  // weight[g * O/groups + o][c][tap]; zeros past O/groups.
  const AlignedArray<T> packed_weight = aligned_array<T>(p.groups * packed_group);
  T* packed = packed_weight.get();
  PhaseTimer pack_timer(Phase::kForwardPack);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t j0 = 0; j0 < group_out; j0 += S::NR)
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t tap = kk / group_channels, c = kk % group_channels;
        for (int64_t j = j0; j < j0 + S::NR; ++j)
          *packed++ = j < group_out
                          ? weight[((g * group_out + j) * group_channels + c) * taps + tap]
                          : T{0};
      }
  std::vector<T> packed_bias;
  if (bias)
    for (int64_t g = 0; g < p.groups; ++g)
      for (int64_t j = 0; j < padded_group_out; ++j)
        packed_bias.push_back(j < group_out ? bias[g * group_out + j] : T{0});
  pack_timer.stop();

  // copy_layout writes all of it.
  Scratch scratch;
  T* channels_last = scratch.array<T>(p.batch * (p.height * p.width + 1) * p.in_channels);
  {
    PhaseTimer timer(Phase::kForwardCopy);
    copy_layout<Layout::kChannelsLast>(input, p, channels_last, parallel_for);
  }

  const int64_t row_size = p.groups * k;
  const int64_t tile = tile_pixels(p, row_size * int64_t{sizeof(T)}, tile_unit<T>(S::MR));
  const int64_t tile_count = ceil_div(p.out_h * p.out_w, tile);
  const Call<T> call{p, channels_last, offset, mask, packed_weight.get(),
                     bias ? packed_bias.data() : nullptr, output, taps, group_channels,
                     group_out, k, packed_group, padded_group_out, row_size, tile,
                     tile_count};
  TaskQueue queue(p.batch * tile_count);
  PhaseTimer timer(Phase::kForwardLoop);
  parallel_for(queue.size(), 1, [&](int64_t, int64_t) { tiles(call, queue); });
}

template <typename T>
void run_best(const T* input, const T* weight, const T* offset, const T* mask, const T* bias,
              const DeformConv2dParams& p, T* output, const ParallelFor& parallel_for) {
  if (p.batch == 0) return;
  switch (selected_isa()) {
#if defined(__x86_64__) || defined(__i386__)
    case Isa::kAvx512:
      return run<T, Isa::kAvx512>(input, weight, offset, mask, bias, p, output, parallel_for,
                                  tiles_avx512<T>);
    case Isa::kAvx2:
      return run<T, Isa::kAvx2>(input, weight, offset, mask, bias, p, output, parallel_for,
                                tiles_avx2<T>);
#endif
    default:
      return run<T, Isa::kBaseline>(input, weight, offset, mask, bias, p, output,
                                    parallel_for, tiles_baseline<T>);
  }
}

}  // namespace

DeformConv2dParams deform_conv2d_check(
    const Shape& input_shape, const Shape& weight_shape,
    const Shape& offset_shape, const OptionalShape& mask_shape,
    const OptionalShape& bias_shape,
    const Shape& stride, const Shape& padding, const Shape& dilation,
    int64_t groups, int64_t offset_groups) {
  const Shape& in = input_shape;
  const Shape& wt = weight_shape;
  check(in.size() == 4, kOp, "input must be 4-D (N, C, H, W), got shape ",
        to_text(in));
  check(wt.size() == 4, kOp,
        "weight must be 4-D (out_channels, C/groups, kh, kw), got shape ",
        to_text(wt));
  check(stride.size() == 2, kOp, "stride must have 2 values (h, w), got ",
        to_text(stride));
  check(padding.size() == 2, kOp, "padding must have 2 values (h, w), got ",
        to_text(padding));
  check(dilation.size() == 2, kOp, "dilation must have 2 values (h, w), got ",
        to_text(dilation));

  check(in[0] >= 0 && in[1] >= 1 && in[2] >= 1 && in[3] >= 1, kOp,
        "input must have N >= 0 and C, H, W >= 1, got shape ", to_text(in));
  check(wt[0] >= 1 && wt[1] >= 1 && wt[2] >= 1 && wt[3] >= 1, kOp,
        "weight dimensions must all be >= 1, got shape ", to_text(wt));
  check(stride[0] >= 1 && stride[1] >= 1, kOp, "stride must be >= 1, got ",
        to_text(stride));
  check(padding[0] >= 0 && padding[1] >= 0, kOp,
        "padding must be >= 0, got ", to_text(padding));
  check(dilation[0] >= 1 && dilation[1] >= 1, kOp,
        "dilation must be >= 1, got ", to_text(dilation));
  check(groups >= 1, kOp, "groups must be >= 1, got ", groups);
  check(offset_groups >= 1, kOp, "offset_groups must be >= 1, got ",
        offset_groups);

  check_not_huge(in, "input shape");
  check_not_huge(wt, "weight shape");
  check_not_huge(stride, "stride");
  check_not_huge(padding, "padding");
  check_not_huge(dilation, "dilation");
  checked_count(in, "input");
  checked_count(wt, "weight");
  // Sample positions are int32 offsets into one input plane.
  check(in[2] * in[3] <= kMaxValue, kOp, "input plane H * W must be at most ",
        kMaxValue, ", got shape ", to_text(in));

  DeformConv2dParams p{};
  p.batch = in[0], p.in_channels = in[1], p.height = in[2], p.width = in[3];
  p.out_channels = wt[0], p.kernel_h = wt[2], p.kernel_w = wt[3];
  p.stride_h = stride[0], p.stride_w = stride[1];
  p.pad_h = padding[0], p.pad_w = padding[1];
  p.dilation_h = dilation[0], p.dilation_w = dilation[1];
  p.groups = groups, p.offset_groups = offset_groups;

  check(p.in_channels % groups == 0, kOp, "input channels C = ", p.in_channels,
        " must be divisible by groups = ", groups);
  check(p.in_channels % offset_groups == 0, kOp, "input channels C = ",
        p.in_channels, " must be divisible by offset_groups = ", offset_groups);
  check(p.out_channels % groups == 0, kOp, "weight.shape[0] (out_channels) = ",
        p.out_channels, " must be divisible by groups = ", groups);
  check(wt[1] == p.in_channels / groups, kOp,
        "weight.shape[1] must be C/groups = ", p.in_channels / groups,
        ", got ", wt[1]);

  p.out_h = output_size(p.height, p.pad_h, p.kernel_h, p.stride_h,
                        p.dilation_h, "height");
  p.out_w = output_size(p.width, p.pad_w, p.kernel_w, p.stride_w,
                        p.dilation_w, "width");
  checked_count({p.batch, p.out_channels, p.out_h, p.out_w}, "output");

  // offset_groups <= C, so these products are bounded by the weight and
  // input counts checked above.
  const int64_t taps = p.kernel_h * p.kernel_w;
  const Shape offset_expected{p.batch, 2 * offset_groups * taps, p.out_h,
                              p.out_w};
  check_shape(offset_shape, offset_expected, "offset",
              "(N, 2*offset_groups*kh*kw, out_h, out_w)");
  checked_count(offset_shape, "offset");  // bounds the kernel's offset indexing
  if (mask_shape)
    check_shape(*mask_shape, {p.batch, offset_groups * taps, p.out_h, p.out_w},
                "mask", "(N, offset_groups*kh*kw, out_h, out_w)");
  if (bias_shape)
    check_shape(*bias_shape, {p.out_channels}, "bias", "(out_channels)");
  return p;
}

void deform_conv2d(const float* input, const float* weight, const float* offset,
                   const float* mask, const float* bias, const DeformConv2dParams& p,
                   float* output, const ParallelFor& parallel_for) {
  run_best(input, weight, offset, mask, bias, p, output, parallel_for);
}

void deform_conv2d(const double* input, const double* weight, const double* offset,
                   const double* mask, const double* bias, const DeformConv2dParams& p,
                   double* output, const ParallelFor& parallel_for) {
  run_best(input, weight, offset, mask, bias, p, output, parallel_for);
}

namespace {

// `count` halves as floats (empty for an absent input).
std::vector<float> widened(const Half* values, int64_t count) {
  std::vector<float> out(values ? count : 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = to_float(values[i]);
  return out;
}

}  // namespace

void deform_conv2d(const Half* input, const Half* weight, const Half* offset,
                   const Half* mask, const Half* bias, const DeformConv2dParams& p,
                   Half* output, const ParallelFor& parallel_for) {
  const int64_t taps = p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  const std::vector<float> x = widened(input, p.batch * p.in_channels * p.height * p.width),
                           w = widened(weight, p.out_channels * p.in_channels / p.groups * taps),
                           o = widened(offset, p.batch * 2 * p.offset_groups * taps * plane),
                           m = widened(mask, p.batch * p.offset_groups * taps * plane),
                           b = widened(bias, p.out_channels);
  std::vector<float> y(p.batch * p.out_channels * plane);
  run_best(x.data(), w.data(), o.data(), mask ? m.data() : nullptr, bias ? b.data() : nullptr,
           p, y.data(), parallel_for);
  for (size_t i = 0; i < y.size(); ++i) output[i] = to_half(y[i]);
}

}  // namespace customops
