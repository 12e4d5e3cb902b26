// Torch binding of AdaLN: argument checks with messages a user can act on, device guard, current stream,
// launch, and the autograd formula. register_adaln(ops) defines its ops; torch_binding.cpp calls it.
#include "adaln.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "autograd.h"
#include "checks.h"
#include "torch_binding.h"

using namespace ckt::checks;
using ckt::autograd::variable_list;

namespace {

// Where (b, s) of an AdaLN tensor starts, in elements: b * batch + s * token.
struct Modulation {
  int64_t batch, token;
};

// x, out and the gradients (B, S, D): any strides, the last dimension contiguous (e.g. a (S, B, D) tensor
// transposed, or a token slice). Rows that fold into one stride get batch == tokens * token, which tells the kernels
// to address row r at r * token.
Modulation adaln_rows(const at::Tensor& t, const char* name) {
  check_last_dim_contiguous(t, name);
  if (t.numel() == 0) return {0, 0};
  const std::vector<Rows> levels = row_levels(t);
  if (levels.size() == 2) return {t.stride(0), t.stride(1)};
  const int64_t row = levels.empty() ? 0 : levels[0].stride;
  return {t.size(1) * row, row};
}

// scale/shift: (B, 1, D) or (B, D) per sample, or (B, S, D) per token, for an input (B, S, D); a size-1 batch
// dimension is shared by all samples. The last dimension must be contiguous; any other strides are fine (the
// unbind() views of LTX's ada_values are taken as they are). Its dtype: the input's, or float32 beside a bfloat16
// or float16 input.
Modulation adaln_modulation(const at::Tensor& t, const char* name, const at::Tensor& input) {
  check_param(t, name, input);
  const int64_t batch = input.size(0), tokens = input.size(1), dim = input.size(2);
  const bool batch_ok = t.dim() >= 2 && (t.size(0) == batch || t.size(0) == 1);
  const bool shape_ok =
      batch_ok && t.size(-1) == dim && (t.dim() == 2 || (t.dim() == 3 && (t.size(1) == tokens || t.size(1) == 1)));
  check(shape_ok, name, " must have shape (", batch, ", 1, ", dim, ") or (", batch, ", ", dim, ") per sample, or (",
        batch, ", ", tokens, ", ", dim, ") per token, for an input of shape ", input.sizes(), "; got ", t.sizes());
  check(t.stride(-1) == 1 || dim <= 1, name, " must be contiguous in its last dimension (stride 1), got stride ",
        t.stride(-1), "; call .contiguous() first");
  return {t.size(0) == 1 ? 0 : t.stride(0), t.dim() == 3 && t.size(1) != 1 ? t.stride(1) : 0};
}

// scale and shift share one dtype (see adaln_modulation), which is also the result's (torch's type promotion).
ckt::DTypes adaln_types(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& shift,
                        const at::Tensor& out, const char* out_name) {
  check(shift.scalar_type() == scale.scalar_type(), "shift has dtype ", shift.scalar_type(), " but scale has dtype ",
        scale.scalar_type(), "; pass both in one dtype");
  const ckt::DType out_dtype = check_output(out, out_name, input, scale.scalar_type(), scale.scalar_type());
  return {dtype_of(input, "input"), dtype_beside_input(scale, "scale"), out_dtype};
}

// y = norm(x) * (1 + scale) + shift over the last dimension of x (B, S, D); norm is RMSNorm or, with
// layer_norm, LayerNorm, both without weight.
void adaln(at::Tensor& out, const at::Tensor& input, const at::Tensor& scale, const at::Tensor& shift, double eps,
           bool layer_norm) {
  check_tensor(input, "input", input);
  check(input.dim() == 3, "input must have shape (batch, tokens, dim), got ", input.sizes());
  const Modulation sc = adaln_modulation(scale, "scale", input), sh = adaln_modulation(shift, "shift", input);
  const ckt::DTypes types = adaln_types(input, scale, shift, out, "out");
  check_same_shape(out, "out", input);
  check(eps >= 0, "eps must be non-negative, got ", eps);
  check_writable(out, "out");
  check_no_overlap(out, "out", input, "input", true);  // in place is fine
  check_no_overlap(out, "out", scale, "scale", false);
  check_no_overlap(out, "out", shift, "shift", false);
  const Modulation x = adaln_rows(input, "input"), y = adaln_rows(out, "out");
  const int64_t rows = input.size(0) * input.size(1), cols = input.size(2);
  if (rows == 0 || cols == 0) return;

  const c10::cuda::CUDAGuard guard(input.device());
  ckt::AdaLnArgs args{};
  args.out = out.data_ptr();
  args.input = input.data_ptr();
  args.scale = scale.data_ptr();
  args.shift = shift.data_ptr();
  args.rows = rows;
  args.cols = cols;
  args.tokens = input.size(1);
  args.out_batch_stride = y.batch;
  args.out_token_stride = y.token;
  args.input_batch_stride = x.batch;
  args.input_token_stride = x.token;
  args.scale_batch_stride = sc.batch;
  args.scale_token_stride = sc.token;
  args.shift_batch_stride = sh.batch;
  args.shift_token_stride = sh.token;
  args.eps = static_cast<float>(eps);
  args.layer_norm = layer_norm;
  check_launch(ckt::adaln(types, args, c10::cuda::getCurrentCUDAStream()), "adaln");
}

at::Tensor adaln_fwd(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& shift, double eps,
                     bool layer_norm) {
  at::Tensor out = at::empty(input.sizes(), input.options().dtype(scale.scalar_type()));
  adaln(out, input, scale, shift, eps, layer_norm);
  return out;
}

// The gradient of a scale or shift (`name`) of shape like `t` from per-chunk fp32 partial sums [batch, chunks, dim]
// (chunks == tokens when the chunks are single tokens): summed over the dimensions `t` broadcasts over.
at::Tensor adaln_reduce(const at::Tensor& partial, const at::Tensor& t, const char* name, int64_t tokens) {
  const int64_t batch = partial.size(0), chunks = partial.size(1), dim = partial.size(2);
  const bool per_token = t.dim() == 3 && t.size(1) != 1 && tokens != 1, shared = t.size(0) == 1;
  // One row per token (and sample), next to a summed other one: nothing to add up, only a cast (sum_rows would
  // spend a 1024-thread block on every 32 columns of every row). Alone, such a gradient takes the row kernel.
  if (per_token && (!shared || batch == 1)) return partial.view(t.sizes()).to(t.scalar_type());
  at::Tensor g = at::empty(t.sizes(), t.options());
  ckt::AdaLnPartialSums sums{g.data_ptr(), partial.data_ptr<float>(), 0, 0, 0, dim, dim};
  if (per_token) {  // chunks are tokens: each its own row, or (shared) that token's rows in every sample, added
    sums.groups = shared ? chunks : batch * chunks;
    sums.rows = shared ? batch : 1;
    sums.group_stride = dim;
    sums.row_stride = chunks * dim;
  } else {  // every chunk of a sample, or of all samples when shared
    sums.groups = shared ? 1 : batch;
    sums.rows = shared ? batch * chunks : chunks;
    sums.group_stride = shared ? 0 : chunks * dim;
  }
  check_launch(ckt::adaln_sum_partials(dtype_beside_input(t, name), sums, c10::cuda::getCurrentCUDAStream()),
               "adaln_bwd");
  return g;
}

// Gradients of adaln(input, scale, shift): (grad_input, grad_scale, grad_shift), each of its tensor's shape and
// dtype (grad_out has the result's, scale's); a modulation gradient not asked for (scale_grad, shift_grad false) is
// an empty tensor instead, and not computed.
std::tuple<at::Tensor, at::Tensor, at::Tensor> adaln_bwd(const at::Tensor& grad_out_in, const at::Tensor& input,
                                                         const at::Tensor& scale, const at::Tensor& shift, double eps,
                                                         bool layer_norm, bool scale_grad, bool shift_grad) {
  check_tensor(input, "input", input);
  check(input.dim() == 3, "input must have shape (batch, tokens, dim), got ", input.sizes());
  // Read in place whatever its leading strides (e.g. expanded zeros); copied only if its last dimension is strided.
  const bool strided_dim = grad_out_in.dim() > 0 && grad_out_in.stride(-1) != 1 && grad_out_in.size(-1) > 1;
  const at::Tensor grad_out = strided_dim ? grad_out_in.contiguous() : grad_out_in;
  const Modulation sc = adaln_modulation(scale, "scale", input), sh = adaln_modulation(shift, "shift", input);
  const ckt::DTypes types = adaln_types(input, scale, shift, grad_out, "grad_out");
  check_same_shape(grad_out, "grad_out", input);
  const Modulation x = adaln_rows(input, "input"), dy = adaln_rows(grad_out, "grad_out");
  const int64_t batch = input.size(0), tokens = input.size(1), cols = input.size(2), rows = batch * tokens;
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  const c10::cuda::CUDAGuard guard(input.device());
  ckt::AdaLnBackwardArgs args{};
  args.grad_input = grad_input.data_ptr();
  args.grad_out = grad_out.data_ptr();
  args.input = input.data_ptr();
  args.scale = scale.data_ptr();
  args.rows = rows;
  args.cols = cols;
  args.tokens = tokens;
  args.chunk_rows = 1;
  args.grad_input_stride = cols;  // contiguous
  args.grad_out_batch_stride = dy.batch;
  args.grad_out_token_stride = dy.token;
  args.input_batch_stride = x.batch;
  args.input_token_stride = x.token;
  args.scale_batch_stride = sc.batch;
  args.scale_token_stride = sc.token;
  args.eps = static_cast<float>(eps);
  args.layer_norm = layer_norm;
  const bool launch = rows > 0 && cols > 0;
  auto none = [](const at::Tensor& t) { return at::empty({0}, t.options()); };  // a gradient not asked for
  auto run = [&] {
    if (launch) {
      check_launch(ckt::adaln_backward(types, args, c10::cuda::getCurrentCUDAStream()), "adaln_bwd");
    } else {
      grad_input.zero_();
    }
  };

  // A modulation with one row per row of x (per token, or a batch of one) has nothing to sum: when every gradient
  // asked for is one of those, the row kernel writes them straight in their dtype, no fp32 scratch (bf16
  // 2 x 7392 x 2048 per token: it reads grad_out, x and scale and writes grad_input and grad_scale, 5 x 60.5 MB;
  // the autograd node takes grad_out itself as grad_shift).
  const bool scale_rows = scale.numel() == input.numel(), shift_rows = shift.numel() == input.numel();
  if ((!scale_grad || scale_rows) && (!shift_grad || shift_rows)) {
    at::Tensor grad_scale = scale_grad ? at::empty(scale.sizes(), scale.options()) : none(scale);
    at::Tensor grad_shift = shift_grad ? at::empty(shift.sizes(), shift.options()) : none(shift);
    args.grad_scale = scale_grad ? grad_scale.data_ptr() : nullptr;
    args.grad_shift = shift_grad ? grad_shift.data_ptr() : nullptr;
    run();
    return {grad_input, grad_scale, grad_shift};
  }

  // Otherwise fp32 partial sums over chunks of tokens sharing their modulation rows: single tokens when a wanted
  // gradient is per token, otherwise enough chunks (about 8 per SM) to fill the GPU; then added up (adaln_reduce).
  const bool per_token = (scale_grad && sc.token != 0) || (shift_grad && sh.token != 0);
  args.chunk_rows = per_token || rows == 0 ? 1 : ckt::adaln_backward_chunk_rows(rows, tokens);
  const int64_t chunks_per_sample = tokens == 0 ? 0 : (tokens + args.chunk_rows - 1) / args.chunk_rows;
  check(batch * chunks_per_sample <= 2147483647, "adaln_bwd: too many rows (", rows, ")");
  const auto fp32 = input.options().dtype(at::kFloat);
  const at::Tensor dscale = scale_grad ? at::empty({batch, chunks_per_sample, cols}, fp32) : at::Tensor();
  const at::Tensor dshift = shift_grad ? at::empty({batch, chunks_per_sample, cols}, fp32) : at::Tensor();
  args.grad_scale_partial = scale_grad ? dscale.data_ptr<float>() : nullptr;
  args.grad_shift_partial = shift_grad ? dshift.data_ptr<float>() : nullptr;
  run();
  return {grad_input, scale_grad ? adaln_reduce(dscale, scale, "scale", tokens) : none(scale),
          shift_grad ? adaln_reduce(dshift, shift, "shift", tokens) : none(shift)};
}

// A scale or shift that needs no gradient gets none computed. A shift of grad_out's shape (per token) gets grad_out
// itself, as autograd's own add does: its gradient is not a kernel's output, no bytes move.
at::Tensor adaln_fwd_autograd(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& shift, double eps,
                              bool layer_norm) {
  static const auto fwd = ckt::autograd::op(&adaln_fwd, "adaln_fwd");
  at::Tensor out = ckt::autograd::call_below_autograd(fwd, input, scale, shift, eps, layer_norm);
  if (ckt::autograd::records_graph(input, scale, shift)) {
    ckt::autograd::record_graph(
        "AdaLnBackward", {input, scale, shift}, {out}, {{input}, {scale}, {shift}},
        [eps, layer_norm](const auto& node, variable_list& grads, auto& saved) {
          static const auto bwd = ckt::autograd::op(&adaln_bwd, "adaln_bwd");
          const at::Tensor& shift = saved[2];
          const bool scale_grad = node.task_should_compute_output(1), shift_grad = node.task_should_compute_output(2);
          const bool shift_is_grad_out = shift_grad && shift.sym_sizes() == grads[0].sym_sizes();  // symbolic: compile
          auto [grad_input, grad_scale, grad_shift] = bwd.call(grads[0], saved[0], saved[1], shift, eps, layer_norm,
                                                               scale_grad, shift_grad && !shift_is_grad_out);
          if (shift_is_grad_out) grad_shift = grads[0].to(shift.scalar_type());
          return variable_list{grad_input, scale_grad ? grad_scale : at::Tensor(),
                               shift_grad ? grad_shift : at::Tensor()};
        });
  }
  return out;
}

}  // namespace

void register_adaln(torch::Library& ops) {
  ops.def("adaln(Tensor! out, Tensor input, Tensor scale, Tensor shift, float eps, bool layer_norm) -> ()");
  ops.impl("adaln", c10::kCUDA, &adaln);
  ops.impl("adaln", c10::kCPU, &adaln);  // only to say, in one line, that inputs must be on the GPU
  ops.def("adaln_fwd(Tensor input, Tensor scale, Tensor shift, float eps, bool layer_norm) -> Tensor");
  ops.impl("adaln_fwd", c10::kCUDA, &adaln_fwd);
  ops.impl("adaln_fwd", c10::kCPU, &adaln_fwd);
  ops.impl("adaln_fwd", torch::dispatch(c10::DispatchKey::Autograd, &adaln_fwd_autograd));
  ops.def(
      "adaln_bwd(Tensor grad_out, Tensor input, Tensor scale, Tensor shift, float eps, bool layer_norm, "
      "bool scale_grad, bool shift_grad) -> (Tensor, Tensor, Tensor)");
  ops.impl("adaln_bwd", c10::kCUDA, &adaln_bwd);
  ops.impl("adaln_bwd", c10::kCPU, &adaln_bwd);
}
