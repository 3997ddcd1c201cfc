// customops::knn_query: k nearest neighbours of packed point clouds
// (csrc/kernels/knn_query.h).
#include "../kernels/knn_query.h"

#include "binding.h"

namespace customops {
namespace {

void check_knn_tensors(const at::Tensor& xyz, const at::Tensor& offset,
                       const std::optional<at::Tensor>& new_xyz,
                       const std::optional<at::Tensor>& new_offset) {
  check_tensor(xyz, "knn_query", "xyz", {at::kFloat});
  check_tensor(offset, "knn_query", "offset", {at::kInt, at::kLong});
  if (new_xyz) check_tensor(*new_xyz, "knn_query", "new_xyz", {at::kFloat});
  if (new_offset) check_tensor(*new_offset, "knn_query", "new_offset", {at::kInt, at::kLong});
}

// Offsets may come as int64 (Pointcept passes either); the kernel reads
// int32, which every valid offset fits since idx itself is int32.
at::Tensor int32_offsets(const at::Tensor& offset, const char* name) {
  if (offset.scalar_type() == at::kInt) return offset.contiguous();
  const at::Tensor narrow = offset.to(at::kInt).contiguous();
  const at::Tensor lost = narrow.to(at::kLong).ne(offset).flatten().nonzero();
  if (lost.numel() > 0) {
    const int64_t i = lost[0][0].item<int64_t>();
    TORCH_CHECK(false, "knn_query: ", name, " must hold int32 values (idx is int32), got ", name,
                "[", i, "] = ", offset.flatten()[i].item<int64_t>());
  }
  return narrow;
}

}  // namespace

// The fake kernel's checks (customops/ops.py calls them through customops._C):
// device, dtype, then (sizes being concrete) shapes and nsample, in the op's
// order; the offsets' values are seen at run time only.  Returns idx's shape
// (m, nsample), or nothing for symbolic sizes.
std::optional<Shape> knn_query_fake_check(int64_t nsample, const at::Tensor& xyz,
                                          const at::Tensor& offset,
                                          const std::optional<at::Tensor>& new_xyz,
                                          const std::optional<at::Tensor>& new_offset) {
  check_knn_tensors(xyz, offset, new_xyz, new_offset);
  if (!all_concrete(xyz, offset, new_xyz, new_offset)) return std::nullopt;
  checked([&] {
    knn_query_check_shapes(shape_of(xyz), shape_of(offset), shape_of(new_xyz),
                           shape_of(new_offset), nsample);
  });
  return Shape{(new_xyz ? *new_xyz : xyz).size(0), nsample};
}

namespace {

std::tuple<at::Tensor, at::Tensor> knn_query_op(int64_t nsample, const at::Tensor& xyz,
                                                const at::Tensor& offset_in,
                                                const std::optional<at::Tensor>& new_xyz_in,
                                                const std::optional<at::Tensor>& new_offset_in) {
  check_knn_tensors(xyz, offset_in, new_xyz_in, new_offset_in);
  // The checks read the offsets' values, so those come first (they are
  // small); the points are copied only once the call is known to be valid.
  const at::Tensor offset = int32_offsets(offset_in, "offset");
  const std::optional<at::Tensor> new_offset =
      new_offset_in ? std::optional(int32_offsets(*new_offset_in, "new_offset")) : std::nullopt;
  checked([&] {
    knn_query_check(shape_of(xyz), shape_of(offset), offset.data_ptr<int32_t>(),
                    shape_of(new_xyz_in), shape_of(new_offset),
                    new_offset ? new_offset->data_ptr<int32_t>() : nullptr, nsample);
  });
  const at::Tensor points = xyz.contiguous();
  const at::Tensor queries = new_xyz_in ? new_xyz_in->contiguous() : points;
  const at::Tensor& query_offset = new_offset ? *new_offset : offset;
  const int64_t m = queries.size(0);
  at::Tensor idx = at::empty({m, nsample}, xyz.options().dtype(at::kInt));
  at::Tensor dist = at::empty({m, nsample}, xyz.options());
  checked([&] {  // refuses non-finite points, which only the kernel reads
    knn_query(points.data_ptr<float>(), offset.data_ptr<int32_t>(), points.size(0),
              queries.data_ptr<float>(), query_offset.data_ptr<int32_t>(), m, offset.size(0),
              nsample, idx.data_ptr<int32_t>(), dist.data_ptr<float>(), torch_parallel_for);
  });
  return {idx, dist};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(customops, m) {
  m.def(
      "knn_query(int nsample, Tensor xyz, Tensor offset, Tensor? new_xyz=None, "
      "Tensor? new_offset=None) -> (Tensor idx, Tensor dist)");
}

TORCH_LIBRARY_IMPL(customops, CPU, m) { m.impl("knn_query", &knn_query_op); }

}  // namespace customops
