// Argument checks shared by every op's binding (torch-ext/<stem>.cpp): errors with messages a user can act on,
// a tensor's rows as a kernel reads them, and launch errors. Header-only: each binding file includes it.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.h"
#include "rows.h"

namespace ckt::checks {

// Error messages are assembled here with std::to_string / snprintf and handed to torch as one C string, never
// formatted through iostreams in this library: a build whose C++ runtime copy differs from the process's (seen
// with one CUDA image's toolchain) crashes inside std::ostream's number formatting.
inline std::string text(const char* s) { return s; }
inline std::string text(const std::string& s) { return s; }
inline std::string text(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", v);
  return buffer;
}
template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline std::string text(I v) {
  return std::to_string(v);
}
inline std::string text(c10::ScalarType t) { return c10::toString(t); }
inline std::string text(const c10::Device& d) { return d.str(); }
template <typename T> inline std::string text(c10::ArrayRef<T> values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + text(values[i]);
  return s + "]";
}

// Raises a RuntimeError whose message is the concatenation of `parts`.
template <typename... Parts> [[noreturn]] inline void fail(const Parts&... parts) {
  std::string message;
  ((message += text(parts)), ...);
  TORCH_CHECK(false, message.c_str());
}

template <typename... Parts> inline void check(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

inline constexpr const char* kCompiledDtypes = CKT_COMPILED_DTYPES;  // from config.h

inline ckt::DType dtype_of(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
#if CKT_WITH_FLOAT32
    case at::kFloat: return ckt::DType::Float32;
#endif
#if CKT_WITH_FLOAT16
    case at::kHalf: return ckt::DType::Float16;
#endif
#if CKT_WITH_BFLOAT16
    case at::kBFloat16: return ckt::DType::BFloat16;
#endif
    default:
      fail(name, " has dtype ", t.scalar_type(), ", but this kernel was built for ", kCompiledDtypes,
           " (the copier answer `precisions`)");
  }
}

// `t` must be a CUDA tensor on `like`'s device with `like`'s dtype (for the first tensor, like == t).
inline void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& like) {
  check(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
  check(t.device() == like.device(), name, " is on ", t.device(), " but the input is on ", like.device());
  check(t.scalar_type() == like.scalar_type(), name, " has dtype ", t.scalar_type(), " but the input has dtype ",
        like.scalar_type(), "; cast it to match");
  dtype_of(t, name);
}

// Parameters (a weight; a scale and shift) and outputs may also be float32 beside a bfloat16 or float16 input, as
// a model kept in fp32 and run under autocast has them: their DType, float32 whether or not it is compiled.
inline ckt::DType dtype_beside_input(const at::Tensor& t, const char* name) {
  return t.scalar_type() == at::kFloat ? ckt::DType::Float32 : dtype_of(t, name);
}

// A weight, scale or shift beside `input`: a CUDA tensor on its device, of its dtype or (see above) float32.
inline ckt::DType check_param(const at::Tensor& t, const char* name, const at::Tensor& input) {
  check(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
  check(t.device() == input.device(), name, " is on ", t.device(), " but the input is on ", input.device());
  const bool half = input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf;
  check(t.scalar_type() == input.scalar_type() || (half && t.scalar_type() == at::kFloat), name, " has dtype ",
        t.scalar_type(), " but the input has dtype ", input.scalar_type(),
        "; pass it in the input's dtype (or in float32 beside a bfloat16 or float16 input)");
  return dtype_beside_input(t, name);
}

// An output (or the gradient reaching one) beside `input`: a CUDA tensor on its device whose dtype is `dtype` or
// `other` (the dtypes the call's types give it: see each op).
inline ckt::DType check_output(const at::Tensor& t, const char* name, const at::Tensor& input, c10::ScalarType dtype,
                               c10::ScalarType other) {
  check(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
  check(t.device() == input.device(), name, " is on ", t.device(), " but the input is on ", input.device());
  check(t.scalar_type() == dtype || t.scalar_type() == other, name, " has dtype ", t.scalar_type(), " but must have ",
        dtype == other ? text(dtype) : text(dtype) + " or " + text(other), " for an input of dtype ",
        input.scalar_type(), " with these parameters");
  return dtype_beside_input(t, name);
}

// A tensor seen as rows of its last dimension: that dimension must be contiguous, and (rows_of, for kernels that
// address rows as row * stride) the leading dimensions must fold into one row index with a single stride (any
// slice along the rows is fine). The template's own ops take any leading strides (row_offsets, below).
struct Rows {
  int64_t count, stride;
};

// The leading dimensions of `t` folded into evenly spaced levels of rows, innermost first: a dimension joins the
// level inside it when its stride is that level's stride times its count (size-1 dimensions go anywhere).
inline std::vector<Rows> row_levels(const at::Tensor& t) {
  std::vector<Rows> levels;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!levels.empty() && t.stride(d) == levels.back().stride * levels.back().count) {
      levels.back().count *= t.size(d);
    } else {
      levels.push_back({t.size(d), t.stride(d)});
    }
  }
  return levels;
}

inline Rows rows_of(const at::Tensor& t, const char* name) {
  check(t.dim() >= 1, name, " must have at least one dimension");
  const int64_t cols = t.size(-1);
  check(t.stride(-1) == 1 || cols <= 1, name, " must be contiguous in its last dimension (stride 1), got stride ",
        t.stride(-1), "; call .contiguous() first");
  if (t.numel() == 0) return {0, cols};  // empty: nothing to read, whatever the strides
  const std::vector<Rows> levels = row_levels(t);
  check(levels.size() <= 1, name, " has strides ", t.strides(),
        " that do not fold into evenly spaced rows; call .contiguous() first");
  return levels.empty() ? Rows{1, cols} : levels[0];
}

// Row addressing of the template's ops: any strides in the leading dimensions, through ckt::RowOffsets
// (kernel_src/rows.h). Inputs that take more levels than a RowOffsets holds are copied once; such outputs are
// written through a contiguous temporary (OutputRows).

inline void check_last_dim_contiguous(const at::Tensor& t, const char* name) {
  check(t.dim() >= 1, name, " must have at least one dimension");
  check(t.stride(-1) == 1 || t.size(-1) <= 1, name, " must be contiguous in its last dimension (stride 1), got stride ",
        t.stride(-1), "; call .contiguous() first");
}

// Rows of `t`: the product of its leading dimensions.
inline int64_t row_count(const at::Tensor& t) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return rows;
}

// Whether the kernels address the rows of `t` (last dimension contiguous) in place: at most kMaxRowLevels levels,
// and fewer than 2^31 rows when there are several (the row number then goes through 32-bit Dividers).
inline bool addressable(const at::Tensor& t) {
  if (t.dim() == 0 || (t.stride(-1) != 1 && t.size(-1) > 1)) return false;
  if (t.numel() == 0) return true;
  const size_t levels = row_levels(t).size();
  return levels <= 1 || (levels <= static_cast<size_t>(ckt::kMaxRowLevels) && row_count(t) <= 2147483647);
}

// The RowOffsets of an addressable tensor (an empty one has no rows to address).
inline ckt::RowOffsets row_offsets(const at::Tensor& t) {
  if (t.numel() == 0) return {};
  const std::vector<Rows> levels = row_levels(t);
  int64_t counts[ckt::kMaxRowLevels] = {}, strides[ckt::kMaxRowLevels] = {};
  const int n = static_cast<int>(std::min<size_t>(levels.size(), ckt::kMaxRowLevels));
  for (int l = 0; l < n; ++l) {
    counts[l] = levels[l].count;
    strides[l] = levels[l].stride;
  }
  return ckt::RowOffsets::of(counts, strides, n);
}

// An input the kernels read: refused (one line) unless its last dimension is contiguous; copied once when its
// leading dimensions take more levels than the kernels address (e.g. some permuted rank-5 views).
inline at::Tensor readable_rows(const at::Tensor& t, const char* name) {
  check_last_dim_contiguous(t, name);
  return addressable(t) ? t : t.contiguous();
}

// A gradient (whatever strides autograd produced: expanded zeros, transposes): itself, or a contiguous copy when
// the kernels cannot address it.
inline at::Tensor gradient_rows(const at::Tensor& t) { return addressable(t) ? t : t.contiguous(); }

// An output the kernels write (out= and in-place calls; undefined when absent): `out` itself when they address its
// rows, otherwise a contiguous temporary that finish() copies into `out` after the launch.
struct OutputRows {
  at::Tensor out, target;  // target: what the kernel writes
  explicit OutputRows(const at::Tensor& t)
      : out(t), target(!t.defined() || addressable(t) ? t : at::empty(t.sizes(), t.options())) {}
  void finish() const {
    if (out.defined() && !target.is_same(out)) out.copy_(target);
  }
};

inline void check_same_shape(const at::Tensor& t, const char* name, const at::Tensor& input) {
  check(t.sizes() == input.sizes(), name, " has shape ", t.sizes(), " but the input has shape ", input.sizes());
}

// Gradients arrive with whatever strides autograd produced (expanded zeros, transposes): rows a kernel cannot read
// in place, as at most `levels` levels of evenly spaced rows, are copied once.
inline at::Tensor as_rows(const at::Tensor& t, size_t levels = 1) {
  if (t.dim() == 0 || t.numel() == 0 || t.stride(-1) != 1) return t.contiguous();
  return row_levels(t).size() <= levels ? t : t.contiguous();
}

// Outputs (out= and in-place calls). A kernel writes each output element once, after reading what it needs, so an
// output may be the very view of an input of the same shape (in place), but must not share memory with an input in
// any other way (it would overwrite elements still to be read), with another output, or with itself.

// True when two elements of `t` may share memory (an expanded tensor, a stride shorter than the dimensions inside
// it): the dimensions sorted by stride must each step past all the elements of the ones inside them.
inline bool overlaps_itself(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions that have more than one index
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements from the first to the last of the dimensions so far, plus one
  for (const auto& [stride, size] : dims) {
    if (stride < span) return true;
    span += stride * (size - 1);
  }
  return false;
}

inline void check_writable(const at::Tensor& out, const char* name) {
  check(!overlaps_itself(out), name, " has elements that share memory (an expanded or overlapping view, strides ",
        out.strides(), "); pass a tensor with memory of its own for every element, e.g. torch.empty_like");
}

enum class Overlap { None, Same, Partial };

// How `a` and `b` share memory: not at all, as the same view (same start, dtype, sizes and strides), or otherwise
// (Partial). Exact for tensors whose rows are evenly spaced with one common row stride (slices of one buffer, e.g.
// the halves of a fused projection); any other pair whose address ranges meet counts as Partial.
inline Overlap overlap(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return Overlap::None;
  auto range = [](const at::Tensor& t) {
    int64_t last = 0;  // offset of the last element, in elements
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    return std::make_pair(begin, begin + static_cast<std::uintptr_t>((last + 1) * t.element_size()));
  };
  const auto [a_begin, a_end] = range(a);
  const auto [b_begin, b_end] = range(b);
  if (a_end <= b_begin || b_end <= a_begin) return Overlap::None;
  if (a_begin == b_begin && a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
      a.strides() == b.strides()) {
    return Overlap::Same;
  }
  // Rows of a and b, one stride apart each: do their column windows meet anywhere on the row period?
  if (a.element_size() != b.element_size() || a.stride(-1) != 1 || b.stride(-1) != 1) return Overlap::Partial;
  const std::vector<Rows> ra = row_levels(a), rb = row_levels(b);
  if (ra.size() != 1 || rb.size() != 1 || ra[0].stride != rb[0].stride) return Overlap::Partial;
  const int64_t period = ra[0].stride, a_cols = a.size(-1), b_cols = b.size(-1);
  const auto delta_bytes = static_cast<int64_t>(b_begin - a_begin);  // may wrap to negative: intended
  if (period < a_cols || period < b_cols || delta_bytes % a.element_size() != 0) return Overlap::Partial;
  const int64_t shift = ((delta_bytes / a.element_size()) % period + period) % period;
  return shift < a_cols || shift + b_cols > period ? Overlap::Partial : Overlap::None;
}

// `out` must not share memory with `t`, except as the same view when `in_place` (the kernel allows it there).
inline void check_no_overlap(const at::Tensor& out, const char* out_name, const at::Tensor& t, const char* name,
                             bool in_place) {
  const Overlap o = overlap(out, t);
  if (o == Overlap::None || (o == Overlap::Same && in_place)) return;
  if (o == Overlap::Same) fail(out_name, " is the same tensor as ", name, "; pass a separate tensor");
  fail(out_name, " shares memory with ", name, " without being the same view of it (it would overwrite elements ",
       "still to be read); pass a separate tensor", in_place ? std::string(", or ") + name + " itself (in place)" : "");
}

inline void check_launch(cudaError_t err, const char* op) {
  check(err == cudaSuccess, op, " failed to launch: ", cudaGetErrorString(err));
}

}  // namespace ckt::checks
