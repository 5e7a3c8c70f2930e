#include "kernels/host/lowp_gemm.h"

#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/convert.h"
#include "kernels/host/matmul.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

enum : int64_t { kLowpGemm = 0x6c6f7770676d01 };

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return dnnl::memory::data_type::bf16;
    case DType::kFloat16:
      return dnnl::memory::data_type::f16;
    case DType::kFloat32:
      return dnnl::memory::data_type::f32;
    case DType::kInt64:
      break;
  }
  DPE_THROW("lowp_gemm: no matrix product in " << dtype_name(t));
}

// A [rows, cols] matrix stored row-major with row stride ld, read transposed when `trans`.
dnnl::memory::desc matrix(DType t, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  return trans ? dnnl::memory::desc({rows, cols}, dnnl_type(t), {1, ld})
               : dnnl::memory::desc({rows, cols}, dnnl_type(t), {ld, 1});
}

// The oneDNN primitive for g, or null when oneDNN has only its reference kernel for it (or none):
// that one is slower than converting to float32.
std::unique_ptr<PreparedPrimitive> native(HostContext& ctx, const LowpGemm& g, bool bias) {
  const auto a = matrix(g.in, g.m, g.k, g.lda, g.trans_a);
  const auto b = matrix(g.in, g.k, g.n, g.ldb, g.trans_b);
  const auto c = dnnl::memory::desc({g.m, g.n}, dnnl_type(g.out), {g.ldc, 1});
  const auto bias_md =
      bias ? dnnl::memory::desc({1, g.n}, dnnl_type(g.in), {g.n, 1}) : dnnl::memory::desc();
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  try {
    // The weights in the layout the kernel wants (VNNI pairs for bfloat16 dot products),
    // reordered into it per call: cheaper than the kernel's own packing of a plain matrix.
    const dnnl::memory::desc b_any({g.k, g.n}, dnnl_type(g.in), dnnl::memory::format_tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, bias_md, c), attr,
                                          ctx.engine());
    // Only AMX beats float32 here: oneDNN 2.6's AVX512-BF16 matmul ran at 0.55x its float32
    // GEMM on an AVX512-BF16 Xeon (77 against 145 GFLOP/s, 1024^3, one thread), and its
    // reference kernels are slower still; every other CPU computes on float32 copies.
    if (std::string(pd.impl_info_str()).find("amx") == std::string::npos) return nullptr;
    auto e = std::make_unique<PreparedPrimitive>();
    e->bind(ctx, DNNL_ARG_SRC, a);
    e->bind(ctx, DNNL_ARG_WEIGHTS, b, pd.weights_desc(), false);
    if (bias) e->bind(ctx, DNNL_ARG_BIAS, bias_md);
    e->bind(ctx, DNNL_ARG_DST, c);
    e->finish(ctx, dnnl::matmul(pd), pd);
    return e;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

}  // namespace

// AMX tiles are 16 rows by 32 bfloat16 of depth: with fewer rows or a shallower depth most of each
// tile is padding, and oneDNN 2.6 ran such products 4-70x slower than the float32 GEMM on
// converted copies (AMX Xeon, one thread: the Mlp head's gx [256, 512] = gy [256, 10] @ w
// [10, 512] at 13.5 GFLOP/s and its gw [10, 512] = gy^T @ x at 35, against 140-170 in float32).
// A rule of the shape, not a timing, so that every device and every run takes the same route and
// computes the same bits.
bool lowp_gemm_tiles_pay(const LowpGemm& g) { return g.m >= 32 && g.k >= 32; }

namespace {

// The cached state of one product: the primitive, or none (then it is emulated).
struct LowpGemmEntry : HostContext::CacheEntry {
  std::unique_ptr<PreparedPrimitive> prim;
};

// Float32 scratch left uninitialised: every element is written before it is read, and zeroing
// a product's operands cost as much as the small products themselves.
using Scratch = std::unique_ptr<float[]>;
Scratch scratch(int64_t n) { return Scratch(new float[static_cast<size_t>(n)]); }

// A strided [rows, cols] matrix of dtype t, widened into contiguous float32.
Scratch widened(const void* p, DType t, int64_t rows, int64_t cols, int64_t ld) {
  Scratch out = scratch(rows * cols);
  const size_t elem = dtype_size(t);
  if (ld == cols) {
    convert(out.get(), DType::kFloat32, p, t, rows * cols);
    return out;
  }
  for (int64_t r = 0; r < rows; ++r) {
    convert(out.get() + r * cols, DType::kFloat32, static_cast<const char*>(p) + r * ld * elem, t,
            cols);
  }
  return out;
}

// The product in float32 on converted copies, rounded once into c.
void emulated(HostContext& ctx, const LowpGemm& g, const void* a, const void* b, const void* bias,
              void* c) {
  const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const Scratch fa = widened(a, g.in, a_rows, a_cols, g.lda);
  const Scratch fb = widened(b, g.in, b_rows, b_cols, g.ldb);
  Scratch fc = scratch(g.m * g.n);
  sgemm(ctx, g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, fa.get(), a_cols, fb.get(), b_cols,
        0.0f, fc.get(), g.n);
  if (bias != nullptr) {
    const Scratch fbias = widened(bias, g.in, 1, g.n, g.n);
    for (int64_t r = 0; r < g.m; ++r) {
      for (int64_t j = 0; j < g.n; ++j) fc[r * g.n + j] += g.alpha * fbias[j];
    }
  }
  if (g.ldc == g.n) return convert(c, g.out, fc.get(), DType::kFloat32, g.m * g.n);
  const size_t elem = dtype_size(g.out);
  for (int64_t r = 0; r < g.m; ++r) {
    convert(static_cast<char*>(c) + r * g.ldc * elem, g.out, fc.get() + r * g.n,
            DType::kFloat32, g.n);
  }
}

}  // namespace

void lowp_gemm(HostContext& ctx, const LowpGemm& g, const void* a, const void* b, const void* bias,
               void* c) {
  if (g.m == 0 || g.n == 0) return;
  int32_t alpha_bits;
  std::memcpy(&alpha_bits, &g.alpha, sizeof alpha_bits);
  const bool has_bias = bias != nullptr;
  auto& e = ctx.cached<LowpGemmEntry>(
      CacheKey(kLowpGemm, {static_cast<int64_t>(g.in), static_cast<int64_t>(g.out), g.trans_a,
                           g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, alpha_bits, has_bias}),
      [&] {
        auto entry = std::make_unique<LowpGemmEntry>();
        if (g.k > 0 && lowp_gemm_tiles_pay(g)) entry->prim = native(ctx, g, has_bias);
        return entry;
      });
  if (e.prim == nullptr) return emulated(ctx, g, a, b, bias, c);
  e.prim->set(DNNL_ARG_SRC, a);
  e.prim->set(DNNL_ARG_WEIGHTS, b);
  if (has_bias) e.prim->set(DNNL_ARG_BIAS, bias);
  e.prim->set(DNNL_ARG_DST, c);
  e.prim->run(ctx);
}

std::string lowp_gemm_engine(DType dtype) {
  HostContext ctx;
  LowpGemm g;
  g.in = g.out = dtype;
  g.m = g.n = g.k = g.lda = g.ldb = g.ldc = 64;
  return native(ctx, g, false) != nullptr ? "AMX" : "emulated in float32";
}

}  // namespace dpe::host
