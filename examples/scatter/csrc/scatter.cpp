// bt_scatter::scatter_sum: the operator schema, the CPU kernel and the Python module stub.
//
// The library holds no pybind11 code: operators are registered with TORCH_LIBRARY when the
// shared object is loaded, and Python reaches them through torch.ops.bt_scatter. That keeps
// the module compatible with the Python limited API (abi3 wheels).
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>

#include "scatter.h"

namespace bt_scatter {

at::Tensor scatter_sum_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim_size) {
  check_scatter_sum_args(src, index, dim_size);
  TORCH_CHECK(src.device().is_cpu(), "scatter_sum_cpu: src must be a CPU tensor");

  const at::Tensor src_c = src.contiguous();
  const at::Tensor index_c = index.contiguous();
  const int64_t rows = src_c.size(0);
  const int64_t inner = scatter_sum_row_numel(src_c);
  const int64_t* idx = index_c.data_ptr<int64_t>();

  // Validate every index before touching memory, so the parallel loop cannot throw.
  for (int64_t r = 0; r < rows; ++r) {
    TORCH_CHECK(idx[r] >= 0 && idx[r] < dim_size, "scatter_sum: index[", r, "] = ", idx[r],
                " is out of range [0, ", dim_size, ")");
  }

  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, src_c.scalar_type(), "scatter_sum_cpu", [&] {
        // Accumulate half/bfloat16 in float: summing thousands of values in 16 bits would
        // lose most of the result's precision.
        using acc_t = at::opmath_type<scalar_t>;
        at::Tensor acc = at::zeros(scatter_sum_out_shape(src_c, dim_size),
                                   src_c.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
        const scalar_t* s = src_c.data_ptr<scalar_t>();
        acc_t* a = acc.data_ptr<acc_t>();
        // Columns are independent: split them across threads, walk rows in order within each.
        at::parallel_for(0, inner, 1024, [&](int64_t begin, int64_t end) {
          for (int64_t r = 0; r < rows; ++r) {
            const scalar_t* row = s + r * inner;
            acc_t* dst = a + idx[r] * inner;
            for (int64_t c = begin; c < end; ++c) {
              dst[c] += static_cast<acc_t>(row[c]);
            }
          }
        });
        if constexpr (std::is_same_v<acc_t, scalar_t>) {
          out = acc;
        } else {
          out = acc.to(src_c.scalar_type());
        }
      });
  return out;
}

}  // namespace bt_scatter

TORCH_LIBRARY(bt_scatter, m) {
  m.def("scatter_sum(Tensor src, Tensor index, int dim_size) -> Tensor");
}

TORCH_LIBRARY_IMPL(bt_scatter, CPU, m) {
  m.impl("scatter_sum", &bt_scatter::scatter_sum_cpu);
}

// `import bt_scatter._C` loads this library (and so runs the registrations above). The module
// itself is empty and uses only the limited API.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_C",    // m_name
      nullptr, // m_doc
      -1,      // m_size
      nullptr, // m_methods
  };
  return PyModule_Create(&module_def);
}
