// CUDA (and, through hipify, ROCm) kernel of bt_scatter::scatter_sum.
//
// Written to hipify cleanly: atomics through gpuAtomicAdd, no __ldg (c10::Half has no HIP
// overload), no warp-size or shuffle assumptions, the device guard and stream from ATen.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/Atomic.cuh>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "scatter.h"

namespace bt_scatter {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// One thread per src element (grid-stride): out[index[row], col] += src[row, col].
// Indices outside [0, dim_size) are skipped: checking them on the host would need a sync.
template <typename scalar_t, typename acc_t>
__global__ void scatter_sum_kernel(const scalar_t* __restrict__ src,
                                   const int64_t* __restrict__ index, acc_t* __restrict__ out,
                                   int64_t numel, int64_t inner, int64_t dim_size) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride) {
    const int64_t row = i / inner;
    const int64_t col = i - row * inner;
    const int64_t bucket = index[row];
    if (bucket < 0 || bucket >= dim_size) {
      continue;
    }
    gpuAtomicAdd(out + bucket * inner + col, static_cast<acc_t>(src[i]));
  }
}

}  // namespace

at::Tensor scatter_sum_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim_size) {
  check_scatter_sum_args(src, index, dim_size);
  TORCH_CHECK(src.is_cuda(), "scatter_sum_cuda: src must be a CUDA tensor");
  const at::cuda::CUDAGuard device_guard(src.device());

  const at::Tensor src_c = src.contiguous();
  const at::Tensor index_c = index.contiguous();
  const int64_t numel = src_c.numel();
  const int64_t inner = scatter_sum_row_numel(src_c);

  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, src_c.scalar_type(), "scatter_sum_cuda", [&] {
        // half/bfloat16 accumulate in a float buffer: native float atomics everywhere, and
        // far less rounding error than 16-bit atomics on crowded buckets.
        using acc_t = at::opmath_type<scalar_t>;
        at::Tensor acc = at::zeros(scatter_sum_out_shape(src_c, dim_size),
                                   src_c.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
        if (numel > 0 && dim_size > 0) {
          const int64_t blocks = std::min<int64_t>((numel + kThreads - 1) / kThreads, kMaxBlocks);
          scatter_sum_kernel<scalar_t, acc_t>
              <<<static_cast<unsigned int>(blocks), kThreads, 0,
                 at::cuda::getCurrentCUDAStream()>>>(src_c.data_ptr<scalar_t>(),
                                                     index_c.data_ptr<int64_t>(),
                                                     acc.data_ptr<acc_t>(), numel, inner, dim_size);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        if constexpr (std::is_same_v<acc_t, scalar_t>) {
          out = acc;
        } else {
          out = acc.to(src_c.scalar_type());
        }
      });
  return out;
}

}  // namespace bt_scatter

TORCH_LIBRARY_IMPL(bt_scatter, CUDA, m) {
  m.impl("scatter_sum", &bt_scatter::scatter_sum_cuda);
}
