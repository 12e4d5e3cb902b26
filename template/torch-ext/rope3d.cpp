// Torch binding of RoPE3D (x or q+k rotation, cos/sin tables from the latent grid): argument checks with
// messages a user can act on, device guard, current stream, launch, and the autograd formulas. register_rope3d(ops)
// defines its ops; torch_binding.cpp calls it.
#include "rope3d.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd.h"
#include "checks.h"
#include "torch_binding.h"

using namespace ckt::checks;
using ckt::autograd::variable_list;

namespace {

// Strides (elements) of a [batch, seq, dim] tensor whose last dimension is contiguous; a batch of one gets
// batch stride 0, so that a [1, seq, dim] table broadcasts over the batch.
struct Rope3dStrides {
  int64_t batch, seq;
};

Rope3dStrides rope3d_strides(const at::Tensor& t, const char* name) {
  check(t.dim() == 3, name, " must have shape [batch, seq, dim], got ", t.sizes());
  check(t.stride(2) == 1 || t.size(2) <= 1, name, " must be contiguous in its last dimension (stride 1), got stride ",
        t.stride(2), "; call .contiguous() first");
  return {t.size(0) == 1 ? 0 : t.stride(0), t.stride(1)};
}

// x (or q/k) and the tensor its result is written to.
void rope3d_check_input(const at::Tensor& x, const char* name, const at::Tensor& out, const char* out_name,
                        const at::Tensor& like) {
  check_tensor(x, name, like);
  check_same_shape(x, name, like);
  check_tensor(out, out_name, like);
  check_same_shape(out, out_name, like);
  rope3d_strides(x, name);
  rope3d_strides(out, out_name);
  check_writable(out, out_name);
  check_no_overlap(out, out_name, x, name, true);  // in place is fine
}

// q and k rotated in one launch: neither output may touch the other tensor of the pair, nor a table.
void rope3d_check_pair(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k) {
  check_no_overlap(q_out, "q_out", k_out, "k_out", false);
  check_no_overlap(q_out, "q_out", k, "k", false);
  check_no_overlap(k_out, "k_out", q, "q", false);
}

void rope3d_check_tables_untouched(const at::Tensor& out, const char* out_name, const at::Tensor& cos,
                                   const at::Tensor& sin) {
  check_no_overlap(out, out_name, cos, "cos", false);
  check_no_overlap(out, out_name, sin, "sin", false);
}

// An fp32 cos/sin table for `x` [B, S, D]: [B, S, D] or [1, S, D] (broadcast over the batch).
void rope3d_check_table(const at::Tensor& t, const char* name, const at::Tensor& x) {
  check(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
  check(t.device() == x.device(), name, " is on ", t.device(), " but the input is on ", x.device());
  check(t.scalar_type() == at::kFloat, name, " must be float32 (as LTXVideoRotaryPosEmbed returns it), got ",
        t.scalar_type());
  check(t.dim() == 3 && (t.size(0) == x.size(0) || t.size(0) == 1) && t.size(1) == x.size(1) && t.size(2) == x.size(2),
        name, " must have shape [", x.size(0), ", ", x.size(1), ", ", x.size(2), "] or [1, ", x.size(1), ", ",
        x.size(2), "] to match the input ", x.sizes(), ", got ", t.sizes());
  rope3d_strides(t, name);
}

void rope3d_check_dim(const at::Tensor& x, const char* name) {
  check(x.dim() == 3, name, " must have shape [batch, seq, dim], got ", x.sizes());
  check(x.size(2) % 2 == 0, name, "'s last dimension must be even (it is rotated in interleaved pairs), got ",
        x.size(2));
}

// The in-kernel generator's description of LTXVideoRotaryPosEmbed(dim, ...) on a frames x height x width grid;
// `params` holds its factors and frequencies (rope3d.py's _grid_params makes it).
ckt::Rope3dGrid rope3d_grid(const at::Tensor& params, int64_t dim, int64_t num_frames, int64_t height, int64_t width,
                            const at::Tensor& like) {
  check(num_frames >= 0 && height >= 0 && width >= 0, "num_frames, height and width must be non-negative, got ",
        num_frames, ", ", height, ", ", width);
  const double tokens = static_cast<double>(num_frames) * static_cast<double>(height) * static_cast<double>(width);
  check(tokens <= 2147483647.0, "the latent grid ", num_frames, " x ", height, " x ", width,
        " has more than 2^31 - 1 tokens");
  check(params.is_cuda() && params.device() == like.device(), "params must be a CUDA tensor on ", like.device(),
        ", got a tensor on ", params.device());
  const int64_t size = ckt::kRope3dFactors + dim / 6;
  check(params.scalar_type() == at::kFloat && params.dim() == 1 && params.size(0) == size && params.is_contiguous(),
        "params must be a contiguous float32 tensor of 9 + dim // 6 = ", size,
        " values (the grid's factors, then its frequencies: rope3d.py's _grid_params), got ", params.scalar_type(), " ",
        params.sizes());
  ckt::Rope3dGrid g{};
  g.params = params.data_ptr<float>();
  g.pad = static_cast<int>(dim % 6);
  g.frames = static_cast<int32_t>(num_frames);
  g.height = static_cast<int32_t>(height);
  g.width = static_cast<int32_t>(width);
  return g;
}

// Fills the tensor fields of `args` for input i.
void rope3d_set_input(ckt::Rope3dArgs& args, int i, at::Tensor& out, const at::Tensor& x) {
  const Rope3dStrides in = rope3d_strides(x, "input"), o = rope3d_strides(out, "out");
  args.out[i] = out.data_ptr();
  args.in[i] = x.data_ptr();
  args.in_stride_b[i] = in.batch;
  args.in_stride_s[i] = in.seq;
  args.out_stride_b[i] = o.batch;
  args.out_stride_s[i] = o.seq;
}

void rope3d_launch(ckt::Rope3dArgs& args, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                   bool transpose, const char* op) {
  args.transpose = transpose;
  args.batch = x.size(0);
  args.seq = x.size(1);
  args.dim = x.size(2);
  if (cos.defined()) {
    const Rope3dStrides c = rope3d_strides(cos, "cos"), s = rope3d_strides(sin, "sin");
    args.cos = cos.data_ptr<float>();
    args.sin = sin.data_ptr<float>();
    args.cos_stride_b = c.batch;
    args.cos_stride_s = c.seq;
    args.sin_stride_b = s.batch;
    args.sin_stride_s = s.seq;
  }
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(ckt::rope3d(dtype_of(x, "input"), args, c10::cuda::getCurrentCUDAStream()), op);
}

// `transpose` applies the transposed rotation: the backward of the rotation (and its inverse when cos/sin are the
// cosines and sines of one angle per pair, as LTX-Video's are).
void rope3d_apply(at::Tensor& out, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  rope3d_check_input(x, "x", out, "out", x);
  rope3d_check_dim(x, "x");
  rope3d_check_table(cos, "cos", x);
  rope3d_check_table(sin, "sin", x);
  rope3d_check_tables_untouched(out, "out", cos, sin);
  ckt::Rope3dArgs args{};
  rope3d_set_input(args, 0, out, x);
  rope3d_launch(args, x, cos, sin, transpose, "rope3d");
}

void rope3d_qk_apply(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  rope3d_check_input(q, "q", q_out, "q_out", q);
  rope3d_check_dim(q, "q");
  rope3d_check_input(k, "k", k_out, "k_out", q);
  rope3d_check_pair(q_out, k_out, q, k);
  rope3d_check_table(cos, "cos", q);
  rope3d_check_table(sin, "sin", q);
  rope3d_check_tables_untouched(q_out, "q_out", cos, sin);
  rope3d_check_tables_untouched(k_out, "k_out", cos, sin);
  ckt::Rope3dArgs args{};
  rope3d_set_input(args, 0, q_out, q);
  rope3d_set_input(args, 1, k_out, k);
  rope3d_launch(args, q, cos, sin, transpose, "rope3d_qk");
}

void rope3d_qk_grid_apply(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& params, int64_t num_frames, int64_t height, int64_t width, bool transpose) {
  rope3d_check_input(q, "q", q_out, "q_out", q);
  rope3d_check_dim(q, "q");
  rope3d_check_input(k, "k", k_out, "k_out", q);
  rope3d_check_pair(q_out, k_out, q, k);
  ckt::Rope3dArgs args{};
  args.grid = rope3d_grid(params, q.size(2), num_frames, height, width, q);
  check(q.size(1) == num_frames * height * width, "q has ", q.size(1),
        " tokens but the latent grid num_frames x height x width = ", num_frames, " x ", height, " x ", width, " has ",
        num_frames * height * width);
  rope3d_set_input(args, 0, q_out, q);
  rope3d_set_input(args, 1, k_out, k);
  rope3d_launch(args, q, at::Tensor(), at::Tensor(), transpose, "rope3d_qk_grid");
}

void rope3d(at::Tensor& out, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  rope3d_apply(out, x, cos, sin, false);
}

void rope3d_qk(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
               const at::Tensor& sin) {
  rope3d_qk_apply(q_out, k_out, q, k, cos, sin, false);
}

void rope3d_qk_grid(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& params, int64_t num_frames, int64_t height, int64_t width) {
  rope3d_qk_grid_apply(q_out, k_out, q, k, params, num_frames, height, width, false);
}

// Functional forms (new outputs) for autograd and torch.compile; the backward is the same op with transpose=true.
at::Tensor rope3d_fwd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  at::Tensor out = at::empty(x.sizes(), x.options());
  rope3d_apply(out, x, cos, sin, transpose);
  return out;
}

std::tuple<at::Tensor, at::Tensor> rope3d_qk_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                 const at::Tensor& sin, bool transpose) {
  at::Tensor q_out = at::empty(q.sizes(), q.options()), k_out = at::empty(k.sizes(), k.options());
  rope3d_qk_apply(q_out, k_out, q, k, cos, sin, transpose);
  return {q_out, k_out};
}

std::tuple<at::Tensor, at::Tensor> rope3d_qk_grid_fwd(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& params, int64_t num_frames, int64_t height,
                                                      int64_t width, bool transpose) {
  at::Tensor q_out = at::empty(q.sizes(), q.options()), k_out = at::empty(k.sizes(), k.options());
  rope3d_qk_grid_apply(q_out, k_out, q, k, params, num_frames, height, width, transpose);
  return {q_out, k_out};
}

void rope3d_cos_sin(at::Tensor& cos, at::Tensor& sin, const at::Tensor& params, int64_t num_frames, int64_t height,
                    int64_t width) {
  auto check_table = [&](const at::Tensor& t, const char* name) {
    check(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
    check(t.device() == cos.device(), name, " is on ", t.device(), " but cos is on ", cos.device());
    check(t.scalar_type() == at::kFloat, name, " must be float32, got ", t.scalar_type());
    check(t.dim() == 3 && t.size(0) == 1, name, " must have shape [1, num_frames * height * width, dim], got ",
          t.sizes());
    rope3d_strides(t, name);
  };
  check_table(cos, "cos");
  check_table(sin, "sin");
  check_same_shape(sin, "sin", cos);
  check(cos.size(2) % 2 == 0, "dim must be even (channels are rotated in interleaved pairs), got ", cos.size(2));
  check_writable(cos, "cos");
  check_writable(sin, "sin");
  check_no_overlap(cos, "cos", sin, "sin", false);
  ckt::Rope3dTableArgs args{};
  args.grid = rope3d_grid(params, cos.size(2), num_frames, height, width, cos);
  check_no_overlap(cos, "cos", params, "params", false);
  check_no_overlap(sin, "sin", params, "params", false);
  check(cos.size(1) == num_frames * height * width, "cos has ", cos.size(1),
        " tokens but the latent grid num_frames x height x width = ", num_frames, " x ", height, " x ", width, " has ",
        num_frames * height * width);
  if (cos.numel() == 0) return;
  args.cos = cos.data_ptr<float>();
  args.sin = sin.data_ptr<float>();
  args.seq = cos.size(1);
  args.dim = cos.size(2);
  args.cos_stride = cos.stride(1);
  args.sin_stride = sin.stride(1);
  const c10::cuda::CUDAGuard guard(cos.device());
  check_launch(ckt::rope3d_cos_sin(args, c10::cuda::getCurrentCUDAStream()), "rope3d_cos_sin");
}

// Autograd. The rotation is linear in x: its gradient is the transposed rotation of the output's gradient (the same
// op, called through autograd, so that it is differentiable in turn). cos and sin get gradients only when they require
// them (LTX-Video's tables do not): y = x * cos + rot(x) * sin, with rot(x) = (-x[2i+1], x[2i]) per pair, so
// d cos = dy * x and d sin = dy * rot(x) (transposed: x * rot(dy)), summed over the batch when the tables broadcast
// over it.
at::Tensor rope3d_rotated(const at::Tensor& t) {
  const std::vector<at::Tensor> pair = t.unflatten(-1, {-1, 2}).unbind(-1);
  return at::stack({pair[1].neg(), pair[0]}, -1).flatten(-2);
}

// (grad_cos, grad_sin) for the (input, output gradient) pairs rotated by the saved cos/sin, the node's inputs
// `cos_index` and `cos_index + 1`; undefined unless one of them needs a gradient.
variable_list rope3d_table_grads(const torch::autograd::Node& node, size_t cos_index, bool transpose,
                                 const at::Tensor& cos, const at::Tensor& sin,
                                 std::initializer_list<std::pair<at::Tensor, at::Tensor>> pairs) {
  if (!node.task_should_compute_output(cos_index) && !node.task_should_compute_output(cos_index + 1)) {
    return {at::Tensor(), at::Tensor()};
  }
  at::Tensor grad_cos, grad_sin;
  for (const auto& [x_in, dy_in] : pairs) {
    const at::Tensor x = x_in.to(at::kFloat), dy = dy_in.to(at::kFloat);
    const at::Tensor dcos = dy.mul(x), dsin = transpose ? x.mul(rope3d_rotated(dy)) : dy.mul(rope3d_rotated(x));
    grad_cos = grad_cos.defined() ? grad_cos.add(dcos) : dcos;
    grad_sin = grad_sin.defined() ? grad_sin.add(dsin) : dsin;
  }
  const int64_t batch = pairs.begin()->first.size(0);
  return {cos.size(0) != batch ? grad_cos.sum({0}, true) : grad_cos,
          sin.size(0) != batch ? grad_sin.sum({0}, true) : grad_sin};
}

// A gradient as the kernel reads it: in place whatever its batch and token strides (a transpose, expanded zeros);
// copied only when its last dimension is strided.
at::Tensor rope3d_gradient(const at::Tensor& g) {
  return g.dim() == 3 && g.stride(2) != 1 && g.size(2) > 1 ? g.contiguous() : g;
}

// An input the backward keeps only when the tables will need it (for their gradients).
at::Tensor rope3d_kept(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return cos.requires_grad() || sin.requires_grad() ? x : at::Tensor();
}

// The functional ops, which each autograd kernel calls below autograd and its backward through autograd (transpose
// flipped).
const auto& rope3d_op() {
  static const auto handle = ckt::autograd::op(&rope3d_fwd, "rope3d_fwd");
  return handle;
}
const auto& rope3d_qk_op() {
  static const auto handle = ckt::autograd::op(&rope3d_qk_fwd, "rope3d_qk_fwd");
  return handle;
}
const auto& rope3d_qk_grid_op() {
  static const auto handle = ckt::autograd::op(&rope3d_qk_grid_fwd, "rope3d_qk_grid_fwd");
  return handle;
}

at::Tensor rope3d_fwd_autograd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  at::Tensor out = ckt::autograd::call_below_autograd(rope3d_op(), x, cos, sin, transpose);
  if (ckt::autograd::records_graph(x, cos, sin)) {
    ckt::autograd::record_graph(
        "Rope3dBackward", {x, cos, sin}, {out}, {{rope3d_kept(x, cos, sin)}, {cos}, {sin}},
        [transpose](const auto& node, variable_list& grads, auto& saved) {
          const at::Tensor &x = saved[0], &cos = saved[1], &sin = saved[2], grad_out = rope3d_gradient(grads[0]);
          const at::Tensor grad_x = rope3d_op().call(grad_out, cos, sin, !transpose);
          const variable_list tables = rope3d_table_grads(node, 1, transpose, cos, sin, {{x, grad_out}});
          return variable_list{grad_x, tables[0], tables[1]};
        });
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> rope3d_qk_fwd_autograd(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& cos, const at::Tensor& sin,
                                                          bool transpose) {
  auto [q_out, k_out] = ckt::autograd::call_below_autograd(rope3d_qk_op(), q, k, cos, sin, transpose);
  if (ckt::autograd::records_graph(q, k, cos, sin)) {
    ckt::autograd::record_graph(
        "Rope3dQkBackward", {q, k, cos, sin}, {q_out, k_out},
        {{rope3d_kept(q, cos, sin)}, {rope3d_kept(k, cos, sin)}, {cos}, {sin}},
        [transpose](const auto& node, variable_list& grads, auto& saved) {
          const at::Tensor &q = saved[0], &k = saved[1], &cos = saved[2], &sin = saved[3];
          const at::Tensor grad_q = rope3d_gradient(grads[0]), grad_k = rope3d_gradient(grads[1]);
          auto [grad_q_in, grad_k_in] = rope3d_qk_op().call(grad_q, grad_k, cos, sin, !transpose);
          const variable_list tables = rope3d_table_grads(node, 2, transpose, cos, sin, {{q, grad_q}, {k, grad_k}});
          return variable_list{grad_q_in, grad_k_in, tables[0], tables[1]};
        });
  }
  return {q_out, k_out};
}

// The grid's tables get no gradient (its parameters are computed, not learned): only q and k do.
std::tuple<at::Tensor, at::Tensor> rope3d_qk_grid_fwd_autograd(const at::Tensor& q, const at::Tensor& k,
                                                               const at::Tensor& params, int64_t num_frames,
                                                               int64_t height, int64_t width, bool transpose) {
  auto [q_out, k_out] =
      ckt::autograd::call_below_autograd(rope3d_qk_grid_op(), q, k, params, num_frames, height, width, transpose);
  if (ckt::autograd::records_graph(q, k)) {
    ckt::autograd::record_graph("Rope3dQkGridBackward", {q, k}, {q_out, k_out}, {{params}},
                                [=](const auto&, variable_list& grads, auto& saved) {
                                  auto [grad_q, grad_k] =
                                      rope3d_qk_grid_op().call(rope3d_gradient(grads[0]), rope3d_gradient(grads[1]),
                                                               saved[0], num_frames, height, width, !transpose);
                                  return variable_list{grad_q, grad_k};
                                });
  }
  return {q_out, k_out};
}

}  // namespace

void register_rope3d(torch::Library& ops) {
  ops.def("rope3d(Tensor! out, Tensor x, Tensor cos, Tensor sin) -> ()");
  ops.impl("rope3d", c10::kCUDA, &rope3d);
  ops.impl("rope3d", c10::kCPU, &rope3d);  // only to say, in one line, that inputs must be on the GPU
  ops.def("rope3d_qk(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos, Tensor sin) -> ()");
  ops.impl("rope3d_qk", c10::kCUDA, &rope3d_qk);
  ops.impl("rope3d_qk", c10::kCPU, &rope3d_qk);
  ops.def(
      "rope3d_qk_grid(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor params, int num_frames, int height, "
      "int width) -> ()");
  ops.impl("rope3d_qk_grid", c10::kCUDA, &rope3d_qk_grid);
  ops.impl("rope3d_qk_grid", c10::kCPU, &rope3d_qk_grid);
  ops.def("rope3d_fwd(Tensor x, Tensor cos, Tensor sin, bool transpose) -> Tensor");
  ops.impl("rope3d_fwd", c10::kCUDA, &rope3d_fwd);
  ops.impl("rope3d_fwd", c10::kCPU, &rope3d_fwd);
  ops.impl("rope3d_fwd", torch::dispatch(c10::DispatchKey::Autograd, &rope3d_fwd_autograd));
  ops.def("rope3d_qk_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, bool transpose) -> (Tensor, Tensor)");
  ops.impl("rope3d_qk_fwd", c10::kCUDA, &rope3d_qk_fwd);
  ops.impl("rope3d_qk_fwd", c10::kCPU, &rope3d_qk_fwd);
  ops.impl("rope3d_qk_fwd", torch::dispatch(c10::DispatchKey::Autograd, &rope3d_qk_fwd_autograd));
  ops.def(
      "rope3d_qk_grid_fwd(Tensor q, Tensor k, Tensor params, int num_frames, int height, int width, bool transpose) "
      "-> (Tensor, Tensor)");
  ops.impl("rope3d_qk_grid_fwd", c10::kCUDA, &rope3d_qk_grid_fwd);
  ops.impl("rope3d_qk_grid_fwd", c10::kCPU, &rope3d_qk_grid_fwd);
  ops.impl("rope3d_qk_grid_fwd", torch::dispatch(c10::DispatchKey::Autograd, &rope3d_qk_grid_fwd_autograd));
  ops.def("rope3d_cos_sin(Tensor! cos, Tensor! sin, Tensor params, int num_frames, int height, int width) -> ()");
  ops.impl("rope3d_cos_sin", c10::kCUDA, &rope3d_cos_sin);
  ops.impl("rope3d_cos_sin", c10::kCPU, &rope3d_cos_sin);
}
