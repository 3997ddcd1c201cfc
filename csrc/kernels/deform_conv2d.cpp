// Deformable convolution as tiled im2col + packed GEMM.
//
// The output pixels of each image are cut into tiles.  For one tile the
// kernel samples every (input channel, kernel tap) row of the im2col matrix
// by bilinear interpolation, writing it straight into the packed-B panel
// layout of gemm.h, and then multiplies each group's weights by its block of
// rows.  Tiles keep the column buffer inside L2 and the memory per thread
// bounded; (image, tile) pairs are the units handed to parallel_for.
#include "deform_conv2d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gemm.h"

namespace customops {
namespace {

constexpr const char* kOp = "deform_conv2d";

// Limits that keep every size product in int64 (and size_t) range.
constexpr int64_t kMaxValue = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxElements = int64_t{1} << 60;

// Tiling of the output pixels.  A tile's column buffer should stay in L2
// (budget below); there should be enough tiles for the threads to share
// evenly (at least kMinTasks per call when the image is big enough); and a
// tile should span a few GEMM panels so the micro-kernel's fixed costs are
// amortized.
constexpr int64_t kColumnBytes = 512 * 1024;
constexpr int64_t kMinTasks = 16;
constexpr int64_t kMinTilePixels = 64;

// Checks that no entry of `values` exceeds kMaxValue, so sums and products
// of a few of them cannot overflow.
void check_not_huge(const Shape& values, const char* name) {
  for (int64_t v : values)
    check(v <= kMaxValue, kOp, name, " values must be at most ", kMaxValue,
          ", got ", to_string(values));
}

// Element count of `shape`, rejecting products above kMaxElements.
int64_t checked_count(const Shape& shape, const char* name) {
  int64_t count = 1;
  for (int64_t d : shape) {
    const bool overflow = __builtin_mul_overflow(count, d, &count);
    check(!overflow && count <= kMaxElements, kOp, name,
          " has too many elements (limit 2^60), shape ", to_string(shape));
  }
  return count;
}

void check_shape(const Shape& given, const Shape& expected, const char* name,
                 const char* layout) {
  check(given == expected, kOp, name, " must have shape ", layout, " = ",
        to_string(expected), ", got ", to_string(given));
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

// Bilinear sampling of one kernel tap at one output pixel: four corner
// indices into an input plane and their weights (mask folded in).  Corners
// outside the image get weight 0 and index 0, so the channel loop needs no
// branches.  (A non-finite value at index 0 would then leak a NaN where
// torchvision reads nothing; inputs are assumed finite.)
struct Sample {
  int32_t index[4];  // the check keeps H * W within int32
  float weight[4];
};

// Where a tile of output pixels sits and how far a tap shifts it.
struct TileTap {
  int64_t first_pixel;       // flat index into the out_h x out_w plane
  int64_t pixels;            // pixels in the tile
  int64_t padded;            // pixels rounded up to whole GEMM panels
  int64_t shift_y, shift_x;  // tap position minus padding
};

// torchvision's bilinear_interpolate at (y, x), scaled by the mask value m:
// zero outside (-1, height) x (-1, width), else the in-image corners.
Sample bilinear_sample(float y, float x, float m, int64_t height,
                       int64_t width) {
  Sample s{};
  // torchvision's bounds test, written so that NaN offsets also read zero.
  if (!(y > -1 && y < height && x > -1 && x < width)) return s;
  const int64_t y0 = static_cast<int64_t>(std::floor(y));
  const int64_t x0 = static_cast<int64_t>(std::floor(x));
  const float ly = y - y0, lx = x - x0, hy = 1 - ly, hx = 1 - lx;
  const bool top = y0 >= 0, bottom = y0 + 1 < height;
  const bool left = x0 >= 0, right = x0 + 1 < width;
  const int32_t base = static_cast<int32_t>(y0 * width + x0);
  const int32_t below = base + static_cast<int32_t>(width);
  if (top && left) s.index[0] = base, s.weight[0] = m * hy * hx;
  if (top && right) s.index[1] = base + 1, s.weight[1] = m * hy * lx;
  if (bottom && left) s.index[2] = below, s.weight[2] = m * ly * hx;
  if (bottom && right) s.index[3] = below + 1, s.weight[3] = m * ly * lx;
  return s;
}

// Samples one tap for every pixel of the tile (padding pixels read zero).
void sample_tap(const DeformConv2dParams& p, const TileTap& tt,
                const float* dy, const float* dx, const float* mask,
                Sample* samples) {
  int64_t oy = tt.first_pixel / p.out_w, ox = tt.first_pixel % p.out_w;
  for (int64_t t = 0; t < tt.pixels; ++t) {
    const int64_t q = tt.first_pixel + t;
    // Same expression and float rounding as torchvision's im2col.
    const float y = static_cast<float>(oy * p.stride_h + tt.shift_y) + dy[q];
    const float x = static_cast<float>(ox * p.stride_w + tt.shift_x) + dx[q];
    const float m = mask ? mask[q] : 1.0f;
    samples[t] = bilinear_sample(y, x, m, p.height, p.width);
    if (++ox == p.out_w) ox = 0, ++oy;
  }
  std::fill(samples + tt.pixels, samples + tt.padded, Sample{});
}

// Planes interpolated per pass of fill_rows.  Channel planes are often a
// multiple of 4 KiB apart, so the same corner in all of them maps to one L1
// set; a few planes at a time keep those lines within the set's ways.
constexpr int64_t kPlanesPerPass = 8;

// One pass of fill_rows over `planes` consecutive channels.
template <int64_t Planes>
__attribute__((always_inline)) inline void fill_pass(
    const float* __restrict first_plane, int64_t plane_size, int64_t planes,
    const Sample* samples, int64_t padded, int64_t k, int64_t nr,
    int64_t row_stride, float* __restrict first_row) {
  const int64_t n = Planes > 0 ? Planes : planes;
  for (int64_t t0 = 0; t0 < padded; t0 += nr, first_row += k * nr)
    for (int64_t lane = 0; lane < nr; ++lane) {
      const Sample s = samples[t0 + lane];
      const float* src = first_plane;
      float* dst = first_row + lane;
      for (int64_t c = 0; c < n; ++c, src += plane_size, dst += row_stride)
        *dst = s.weight[0] * src[s.index[0]] + s.weight[1] * src[s.index[1]] +
               s.weight[2] * src[s.index[2]] + s.weight[3] * src[s.index[3]];
    }
}

// Interpolates `channels` consecutive input planes at one tap's samples into
// rows of a packed column matrix that are row_stride floats apart (pixel t
// at panel t / nr, lane t % nr; panels k * nr floats apart).  Channels are
// the inner loop, so each sample is loaded once per pass and its four
// corners stay in registers.  The loop is bound by its loads (four per
// value), so it needs no special instruction set.
void fill_rows(const float* first_plane, int64_t plane_size, int64_t channels,
               const Sample* samples, int64_t padded, int64_t k, int64_t nr,
               int64_t row_stride, float* first_row) {
  int64_t c = 0;
  for (; c + kPlanesPerPass <= channels; c += kPlanesPerPass)
    fill_pass<kPlanesPerPass>(first_plane + c * plane_size, plane_size,
                              kPlanesPerPass, samples, padded, k, nr,
                              row_stride, first_row + c * row_stride);
  if (c < channels)
    fill_pass<0>(first_plane + c * plane_size, plane_size, channels - c,
                 samples, padded, k, nr, row_stride,
                 first_row + c * row_stride);
}

// Builds the packed column matrices of every group for one tile of image n.
// Taps are sampled once per offset group and reused by all its channels,
// which may span several groups (row blocks of different matrices).
void im2col_tile(const float* input, const float* offset, const float* mask,
                 const DeformConv2dParams& p, int64_t n, TileTap tt,
                 int64_t nr, Sample* samples, float* columns) {
  const int64_t plane = p.height * p.width;
  const int64_t out_plane = p.out_h * p.out_w;
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t group_channels = p.in_channels / p.groups;
  const int64_t offset_group_channels = p.in_channels / p.offset_groups;
  const int64_t k = group_channels * taps;
  const float* image = input + n * p.in_channels * plane;
  for (int64_t og = 0; og < p.offset_groups; ++og) {
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int64_t ch = og * taps + tap;
      const float* dy =
          offset + (n * 2 * p.offset_groups * taps + 2 * ch) * out_plane;
      const float* m =
          mask ? mask + (n * p.offset_groups * taps + ch) * out_plane : nullptr;
      tt.shift_y = (tap / p.kernel_w) * p.dilation_h - p.pad_h;
      tt.shift_x = (tap % p.kernel_w) * p.dilation_w - p.pad_w;
      sample_tap(p, tt, dy, dy + out_plane, m, samples);
      const int64_t og_end = (og + 1) * offset_group_channels;
      for (int64_t c = og * offset_group_channels; c < og_end;) {
        const int64_t g = c / group_channels;
        const int64_t run_end = std::min(og_end, (g + 1) * group_channels);
        const int64_t row = (c - g * group_channels) * taps + tap;
        fill_rows(image + c * plane, plane, run_end - c, samples, tt.padded,
                  k, nr, taps * nr, columns + g * k * tt.padded + row * nr);
        c = run_end;
      }
    }
  }
}

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Pixels per tile, a multiple of the GEMM panel width nr (see the tiling
// constants above); tiles of one image come out (nearly) equal.
int64_t tile_pixels(const DeformConv2dParams& p, int64_t nr) {
  const int64_t pixels = p.out_h * p.out_w;
  const int64_t row_bytes =
      p.in_channels * p.kernel_h * p.kernel_w * int64_t{sizeof(float)};
  const int64_t fit = std::max(nr, kColumnBytes / row_bytes / nr * nr);
  const int64_t batch = std::max<int64_t>(p.batch, 1);
  const int64_t tiles_wanted = (kMinTasks + batch - 1) / batch;
  const int64_t balanced = std::max(
      round_up(kMinTilePixels, nr), round_up(pixels / tiles_wanted, nr));
  const int64_t tile = std::min({fit, balanced, round_up(pixels, nr)});
  const int64_t tiles = (pixels + tile - 1) / tile;
  return round_up((pixels + tiles - 1) / tiles, nr);
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
        to_string(in));
  check(wt.size() == 4, kOp,
        "weight must be 4-D (out_channels, C/groups, kh, kw), got shape ",
        to_string(wt));
  check(stride.size() == 2, kOp, "stride must have 2 values (h, w), got ",
        to_string(stride));
  check(padding.size() == 2, kOp, "padding must have 2 values (h, w), got ",
        to_string(padding));
  check(dilation.size() == 2, kOp, "dilation must have 2 values (h, w), got ",
        to_string(dilation));

  check(in[0] >= 0 && in[1] >= 1 && in[2] >= 1 && in[3] >= 1, kOp,
        "input must have N >= 0 and C, H, W >= 1, got shape ", to_string(in));
  check(wt[0] >= 1 && wt[1] >= 1 && wt[2] >= 1 && wt[3] >= 1, kOp,
        "weight dimensions must all be >= 1, got shape ", to_string(wt));
  check(stride[0] >= 1 && stride[1] >= 1, kOp, "stride must be >= 1, got ",
        to_string(stride));
  check(padding[0] >= 0 && padding[1] >= 0, kOp,
        "padding must be >= 0, got ", to_string(padding));
  check(dilation[0] >= 1 && dilation[1] >= 1, kOp,
        "dilation must be >= 1, got ", to_string(dilation));
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
        kMaxValue, ", got shape ", to_string(in));

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
                   const float* mask, const float* bias,
                   const DeformConv2dParams& p, float* output,
                   const ParallelFor& parallel_for) {
  const int64_t out_plane = p.out_h * p.out_w;
  if (p.batch == 0) return;
  const GemmBlocking blocking = gemm_blocking();
  const int64_t group_out = p.out_channels / p.groups;
  const int64_t k = p.in_channels / p.groups * p.kernel_h * p.kernel_w;

  // Weights of each group, packed once and shared read-only by all tiles.
  const int64_t packed_group = gemm_packed_size(group_out, k, blocking.mr);
  std::vector<float> packed_weight(p.groups * packed_group);
  for (int64_t g = 0; g < p.groups; ++g)
    gemm_pack_a(weight + g * group_out * k, k, group_out, k, blocking.mr,
                packed_weight.data() + g * packed_group);

  const int64_t tile = tile_pixels(p, blocking.nr);
  const int64_t tiles = (out_plane + tile - 1) / tile;
  parallel_for(p.batch * tiles, 1, [&](int64_t begin, int64_t end) {
    // Scratch per call, so concurrent calls and threads never share it.
    // Left uninitialized: im2col writes every element the GEMM reads, and
    // the pool may call this body once per task.
    const std::unique_ptr<float[]> columns(new float[p.groups * k * tile]);
    const std::unique_ptr<Sample[]> samples(new Sample[tile]);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / tiles;
      TileTap tt{};
      tt.first_pixel = task % tiles * tile;
      tt.pixels = std::min(tile, out_plane - tt.first_pixel);
      tt.padded = round_up(tt.pixels, blocking.nr);
      im2col_tile(input, offset, mask, p, n, tt, blocking.nr, samples.get(),
                  columns.get());
      for (int64_t g = 0; g < p.groups; ++g)
        gemm_packed(group_out, tt.pixels, k,
                    packed_weight.data() + g * packed_group,
                    columns.get() + g * k * tt.padded,
                    bias ? bias + g * group_out : nullptr,
                    output + (n * p.out_channels + g * group_out) * out_plane +
                        tt.first_pixel,
                    out_plane);
    }
  });
}

}  // namespace customops
