// Shared declarations and argument checks for bt_scatter::scatter_sum.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

namespace bt_scatter {

// Validates the arguments every backend shares; the messages name the argument at fault.
inline void check_scatter_sum_args(const at::Tensor& src, const at::Tensor& index,
                                   int64_t dim_size) {
  TORCH_CHECK(src.dim() >= 1, "scatter_sum: src must have at least one dimension");
  TORCH_CHECK(index.dim() == 1, "scatter_sum: index must be 1-D, got ", index.dim(),
              " dimensions");
  TORCH_CHECK(index.scalar_type() == at::kLong, "scatter_sum: index must be int64, got ",
              index.scalar_type());
  TORCH_CHECK(index.size(0) == src.size(0), "scatter_sum: index has ", index.size(0),
              " entries but src has ", src.size(0), " rows");
  TORCH_CHECK(dim_size >= 0, "scatter_sum: dim_size must be >= 0, got ", dim_size);
  TORCH_CHECK(src.device() == index.device(), "scatter_sum: src is on ", src.device(),
              " but index is on ", index.device());
}

// Shape of the result: src's shape with dim 0 replaced by dim_size.
inline std::vector<int64_t> scatter_sum_out_shape(const at::Tensor& src, int64_t dim_size) {
  std::vector<int64_t> shape = src.sizes().vec();
  shape[0] = dim_size;
  return shape;
}

// Number of elements per row of src (product of all dims but the first).
inline int64_t scatter_sum_row_numel(const at::Tensor& src) {
  int64_t inner = 1;
  for (int64_t d = 1; d < src.dim(); ++d) {
    inner *= src.size(d);
  }
  return inner;
}

}  // namespace bt_scatter
