// Where a tensor's rows start: the leading dimensions of a tensor whose last dimension is contiguous, folded into
// up to kMaxRowLevels evenly spaced levels (RowOffsets), and the division that splits a row number into them
// (Divider, also the index math of flat launches). Host-safe: the torch bindings build RowOffsets for the kernels.
// ckt: cuda-kernel-template's kernel helpers.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace ckt {

// Index math of flat (elementwise) launches, which number their vectors 0, 1, ... across rows and map each back to
// its row and column, and of RowOffsets: n / d for a divisor fixed at launch (1 <= d < 2^31) as a multiply-high,
// an add and a shift; exact for every n < 2^31 (Granlund & Montgomery, 1994). Keeps integer division out of kernels.
struct Divider {
  uint32_t d = 1, magic = 1, shift = 0;
  Divider() = default;
  explicit Divider(uint32_t divisor) : d(divisor), magic(0), shift(0) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>((((uint64_t{1} << shift) - d) << 32) / d + 1);
  }
#ifdef __CUDACC__
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
#endif
};

// Levels of rows the kernels address in place: a contiguous or row-sliced tensor has one; the transposed q/k of a
// per-head norm ([B, S, H, D] viewed as [B, H, S, D]) three (two with B == 1); permuted rank-4/5 views up to
// three or four. The bindings copy inputs with more levels once and write such outputs through a contiguous
// temporary (torch-ext/checks.h).
constexpr int kMaxRowLevels = 3;

// Row r (numbered in the tensor's logical order) starts at element offset(r). One level: r * stride[0]. More:
// r = (i2 * count1 + i1) * count0 + i0 and the offset is i0 * stride[0] + i1 * stride[1] + i2 * stride[2], with
// two fast divisions per row (two levels run as three with count1 == 1); the bindings use them only for fewer
// than 2^31 rows, so the row number fits the Divider.
struct RowOffsets {
  int64_t stride[kMaxRowLevels] = {0, 0, 0};  // elements between consecutive rows of each level, innermost first
  Divider count[kMaxRowLevels - 1];           // rows of levels 0 and 1
  bool one_level = true;

  // Rows `row_stride` elements apart (one level).
  static RowOffsets spaced(int64_t row_stride) {
    RowOffsets r;
    r.stride[0] = row_stride;
    return r;
  }

  // counts[l] rows `strides[l]` apart at level l, innermost first; at most kMaxRowLevels levels, and fewer than
  // 2^31 rows in all when there is more than one.
  static RowOffsets of(const int64_t* counts, const int64_t* strides, int levels) {
    RowOffsets r;
    if (levels == 1) return spaced(strides[0]);
    r.one_level = levels == 0;
    if (levels == 2) {
      r.stride[0] = strides[0];
      r.stride[2] = strides[1];
      r.count[0] = Divider(static_cast<uint32_t>(counts[0]));
    }
    if (levels == 3) {
      for (int l = 0; l < 3; ++l) r.stride[l] = strides[l];
      r.count[0] = Divider(static_cast<uint32_t>(counts[0]));
      r.count[1] = Divider(static_cast<uint32_t>(counts[1]));
    }
    return r;
  }

  // Whether every row start is a multiple of `elements` elements from the first (e.g. one 16-byte vector).
  bool strides_multiple_of(int64_t elements) const {
    for (const int64_t s : stride) {
      if (s % elements != 0) return false;
    }
    return true;
  }

  // Whether a launch over these tensors needs the general index math (one of them has several levels).
  static bool any_multi_level(std::initializer_list<RowOffsets> rows) {
    for (const RowOffsets& r : rows) {
      if (!r.one_level) return true;
    }
    return false;
  }

#ifdef __CUDACC__
  // Row `row`'s first element. Kernels come in two instantiations: MULTI false when every tensor of the launch has
  // one level (row * stride[0], nothing else: contiguous and row-sliced tensors run the code they ran before
  // RowOffsets existed, with the same registers), MULTI true otherwise (see any_multi_level).
  template <bool MULTI> __device__ __forceinline__ int64_t offset(int64_t row) const {
    if (!MULTI || one_level) return row * stride[0];
    const uint32_t r = static_cast<uint32_t>(row), q0 = count[0].div(r), q1 = count[1].div(q0);
    return static_cast<int64_t>(r - q0 * count[0].d) * stride[0] +
           static_cast<int64_t>(q0 - q1 * count[1].d) * stride[1] + static_cast<int64_t>(q1) * stride[2];
  }
#endif
};

}  // namespace ckt
