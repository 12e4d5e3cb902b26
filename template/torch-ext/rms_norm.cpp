// Torch binding of RMSNorm and its fused residual add: argument checks with messages a user can act on,
// device guard, current stream, launch, and the autograd formulas. register_rms_norm(ops) defines its ops;
// torch_binding.cpp calls it.
#include "rms_norm.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "autograd.h"
#include "checks.h"
#include "torch_binding.h"

using namespace ckt::checks;
using ckt::autograd::variable_list;

namespace {

// Types: input, residual and residual_out share one dtype; the weight has it too or, beside a bfloat16 or float16
// input, is float32; out has the input's dtype or (with a float32 weight) float32.
void fused_add_rms_norm(at::Tensor& out, at::Tensor& residual_out, const at::Tensor& input, const at::Tensor& residual,
                        const std::optional<at::Tensor>& weight, double eps, bool single_rounding) {
  const bool fused = residual.defined();
  check_tensor(input, "input", input);
  const int64_t cols = input.dim() > 0 ? input.size(-1) : 0;
  const ckt::DType param = weight ? check_param(*weight, "weight", input) : dtype_of(input, "input");
  if (weight) {
    check(weight->dim() == 1 && weight->size(0) == cols, "weight must have shape [", cols,
          "] (the input's last dimension), got ", weight->sizes());
    check(weight->is_contiguous(), "weight must be contiguous");
  }
  const ckt::DType out_dtype =
      check_output(out, "out", input, input.scalar_type(), weight ? weight->scalar_type() : input.scalar_type());
  check_same_shape(out, "out", input);
  if (fused) {
    check_tensor(residual, "residual", input);
    check_same_shape(residual, "residual", input);
    check_tensor(residual_out, "residual_out", input);
    check_same_shape(residual_out, "residual_out", input);
  }
  check(eps >= 0, "eps must be non-negative, got ", eps);
  check_writable(out, "out");  // in place (out is input, residual_out is residual, ...) is fine; overlap is not
  check_no_overlap(out, "out", input, "input", true);
  if (weight) check_no_overlap(out, "out", *weight, "weight", false);
  if (fused) {
    check_writable(residual_out, "residual_out");
    check_no_overlap(out, "out", residual_out, "residual_out", false);
    check_no_overlap(out, "out", residual, "residual", true);
    check_no_overlap(residual_out, "residual_out", input, "input", true);
    check_no_overlap(residual_out, "residual_out", residual, "residual", true);
    if (weight) check_no_overlap(residual_out, "residual_out", *weight, "weight", false);
  }
  const at::Tensor x = readable_rows(input, "input");
  const at::Tensor r = fused ? readable_rows(residual, "residual") : at::Tensor();
  check_last_dim_contiguous(out, "out");
  if (fused) check_last_dim_contiguous(residual_out, "residual_out");
  const int64_t rows = row_count(input);
  if (rows == 0 || cols == 0) return;

  const c10::cuda::CUDAGuard guard(input.device());
  const OutputRows y(out), h(fused ? residual_out : at::Tensor());
  ckt::RmsNormArgs args{};
  args.out = y.target.data_ptr();
  args.input = x.data_ptr();
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.residual_out = fused ? h.target.data_ptr() : nullptr;
  args.residual = fused ? r.data_ptr() : nullptr;
  args.rows = rows;
  args.cols = cols;
  args.out_rows = row_offsets(y.target);
  args.input_rows = row_offsets(x);
  if (fused) {
    args.residual_out_rows = row_offsets(h.target);
    args.residual_rows = row_offsets(r);
  }
  args.eps = static_cast<float>(eps);
  args.single_rounding = single_rounding;
  const ckt::DTypes types{dtype_of(input, "input"), param, out_dtype};
  check_launch(ckt::rms_norm(types, args, c10::cuda::getCurrentCUDAStream()), "rms_norm");
  y.finish();
  h.finish();
}

void rms_norm(at::Tensor& out, const at::Tensor& input, const std::optional<at::Tensor>& weight, double eps,
              bool single_rounding) {
  at::Tensor no_residual;
  fused_add_rms_norm(out, no_residual, input, at::Tensor(), weight, eps, single_rounding);
}

// out_dtype: the result's dtype, the input's when not given (see fused_add_rms_norm for the combinations).
at::Tensor rms_norm_fwd(const at::Tensor& input, const std::optional<at::Tensor>& weight, double eps,
                        bool single_rounding, std::optional<at::ScalarType> out_dtype) {
  at::Tensor out = at::empty(input.sizes(), input.options().dtype(out_dtype.value_or(input.scalar_type())));
  rms_norm(out, input, weight, eps, single_rounding);
  return out;
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_fwd(const at::Tensor& input, const at::Tensor& residual,
                                                          const std::optional<at::Tensor>& weight, double eps,
                                                          bool single_rounding,
                                                          std::optional<at::ScalarType> out_dtype) {
  at::Tensor out = at::empty(input.sizes(), input.options().dtype(out_dtype.value_or(input.scalar_type())));
  at::Tensor residual_out = at::empty(input.sizes(), input.options());
  fused_add_rms_norm(out, residual_out, input, residual, weight, eps, single_rounding);
  return {out, residual_out};
}

// Gradients of rms_norm(input, weight) (input: for the fused add, its residual output) given grad_out, plus
// grad_residual (the gradient reaching the fused add's residual output) when defined. Returns (grad_input,
// grad_weight); grad_weight is empty without a weight. grad_out has the forward output's dtype, grad_input the
// input's and grad_weight the weight's (an fp32 weight's gradient is summed in fp32 and stays fp32).
std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& grad_out_in,
                                                const std::optional<at::Tensor>& grad_residual_in,
                                                const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                                double eps, bool single_rounding) {
  check_tensor(input, "input", input);
  const at::Tensor grad_out = gradient_rows(grad_out_in);  // e.g. q_norm's gradient, coming back from a transpose
  const ckt::DType param = weight ? check_param(*weight, "weight", input) : dtype_of(input, "input");
  const ckt::DType grad_dtype = check_output(grad_out, "grad_out", input, input.scalar_type(),
                                             weight ? weight->scalar_type() : input.scalar_type());
  check_same_shape(grad_out, "grad_out", input);
  at::Tensor grad_residual;
  if (grad_residual_in && grad_residual_in->defined()) {
    grad_residual = gradient_rows(*grad_residual_in);
    check_tensor(grad_residual, "grad_residual", input);
    check_same_shape(grad_residual, "grad_residual", input);
  }
  const int64_t cols = input.dim() > 0 ? input.size(-1) : 0;
  if (weight) {
    check(weight->dim() == 1 && weight->size(0) == cols && weight->is_contiguous(),
          "weight must be a contiguous tensor of shape [", cols, "], got ", weight->sizes());
  }
  const at::Tensor x = readable_rows(input, "input");
  const int64_t rows = row_count(input);
  at::Tensor grad_input = at::empty(input.sizes(), input.options());

  ckt::RmsNormBackwardArgs args{};
  args.grad_input = grad_input.data_ptr();
  args.grad_out = grad_out.data_ptr();
  args.input = x.data_ptr();
  args.weight = weight ? weight->data_ptr() : nullptr;
  args.grad_residual = grad_residual.defined() ? grad_residual.data_ptr() : nullptr;
  args.rows = rows;
  args.cols = cols;
  args.grad_input_stride = cols;  // contiguous
  args.grad_out_rows = row_offsets(grad_out);
  args.input_rows = row_offsets(x);
  if (grad_residual.defined()) args.grad_residual_rows = row_offsets(grad_residual);
  args.eps = static_cast<float>(eps);
  args.single_rounding = single_rounding;
  const ckt::DTypes types{dtype_of(input, "input"), param, grad_dtype};
  const c10::cuda::CUDAGuard guard(input.device());  // the launch plan reads the current device's SMs
  const bool empty = rows == 0 || cols == 0;
  at::Tensor grad_weight = !weight ? at::empty({0}, input.options())
                           : empty ? at::zeros({cols}, weight->options())  // a sum over no rows
                                   : at::empty({cols}, weight->options());
  at::Tensor partial;  // scratch: the kernel's per-block sums, added up into grad_weight
  if (weight && !empty) {
    partial = at::empty({ckt::rms_norm_backward_partial_rows(types, args), cols}, input.options().dtype(at::kFloat));
    args.weight_grad_partial = partial.data_ptr<float>();
    args.weight_grad = grad_weight.data_ptr();
  }
  if (!empty) {
    check_launch(ckt::rms_norm_backward(types, args, c10::cuda::getCurrentCUDAStream()), "rms_norm_bwd");
  }
  return {grad_input, grad_weight};
}

// Autograd: both forms share one backward kernel; the fused add's gradient reaches input and residual alike.
at::Tensor rms_norm_fwd_autograd(const at::Tensor& input, const std::optional<at::Tensor>& weight, double eps,
                                 bool single_rounding, std::optional<at::ScalarType> out_dtype) {
  static const auto fwd = ckt::autograd::op(&rms_norm_fwd, "rms_norm_fwd");
  at::Tensor out = ckt::autograd::call_below_autograd(fwd, input, weight, eps, single_rounding, out_dtype);
  if (ckt::autograd::records_graph(input, weight)) {
    const at::Tensor w = ckt::autograd::saved(weight);
    ckt::autograd::record_graph("RmsNormBackward", {input, w}, {out}, {{input}, {w}},
                                [eps, single_rounding](const auto&, variable_list& grads, auto& saved) {
                                  static const auto bwd = ckt::autograd::op(&rms_norm_bwd, "rms_norm_bwd");
                                  const at::Tensor &x = saved[0], &w = saved[1];
                                  auto [grad_input, grad_weight] = bwd.call(
                                      grads[0], std::nullopt, x, ckt::autograd::as_optional(w), eps, single_rounding);
                                  return variable_list{grad_input, w.defined() ? grad_weight : at::Tensor()};
                                });
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_fwd_autograd(const at::Tensor& input, const at::Tensor& residual,
                                                                   const std::optional<at::Tensor>& weight, double eps,
                                                                   bool single_rounding,
                                                                   std::optional<at::ScalarType> out_dtype) {
  static const auto fwd = ckt::autograd::op(&fused_add_rms_norm_fwd, "fused_add_rms_norm_fwd");
  auto [out, h] = ckt::autograd::call_below_autograd(fwd, input, residual, weight, eps, single_rounding, out_dtype);
  if (ckt::autograd::records_graph(input, residual, weight)) {
    const at::Tensor w = ckt::autograd::saved(weight);
    // h = input + residual as rounded and stored (an output: saved as one)
    ckt::autograd::record_graph(
        "FusedAddRmsNormBackward", {input, residual, w}, {out, h}, {{h, true}, {w}},
        [eps, single_rounding](const auto&, variable_list& grads, auto& saved) {
          static const auto bwd = ckt::autograd::op(&rms_norm_bwd, "rms_norm_bwd");
          const at::Tensor &h = saved[0], &w = saved[1];
          auto [grad_input, grad_weight] =
              bwd.call(grads[0], grads[1], h, ckt::autograd::as_optional(w), eps, single_rounding);
          return variable_list{grad_input, grad_input, w.defined() ? grad_weight : at::Tensor()};
        });
  }
  return {out, h};
}

}  // namespace

void register_rms_norm(torch::Library& ops) {
  ops.def("rms_norm(Tensor! out, Tensor input, Tensor? weight, float eps, bool single_rounding) -> ()");
  ops.impl("rms_norm", c10::kCUDA, &rms_norm);
  ops.impl("rms_norm", c10::kCPU, &rms_norm);  // only to say, in one line, that inputs must be on the GPU
  ops.def(
      "fused_add_rms_norm(Tensor! out, Tensor! residual_out, Tensor input, Tensor residual, Tensor? weight, "
      "float eps, bool single_rounding) -> ()");
  ops.impl("fused_add_rms_norm", c10::kCUDA, &fused_add_rms_norm);
  ops.impl("fused_add_rms_norm", c10::kCPU, &fused_add_rms_norm);
  // Functional forms: what autograd and torch.compile see (autograd formulas above, fake ones in Python).
  ops.def(
      "rms_norm_fwd(Tensor input, Tensor? weight, float eps, bool single_rounding, ScalarType? out_dtype=None) -> "
      "Tensor");
  ops.impl("rms_norm_fwd", c10::kCUDA, &rms_norm_fwd);
  ops.impl("rms_norm_fwd", c10::kCPU, &rms_norm_fwd);
  ops.impl("rms_norm_fwd", torch::dispatch(c10::DispatchKey::Autograd, &rms_norm_fwd_autograd));
  ops.def(
      "fused_add_rms_norm_fwd(Tensor input, Tensor residual, Tensor? weight, float eps, bool single_rounding, "
      "ScalarType? out_dtype=None) -> (Tensor, Tensor)");
  ops.impl("fused_add_rms_norm_fwd", c10::kCUDA, &fused_add_rms_norm_fwd);
  ops.impl("fused_add_rms_norm_fwd", c10::kCPU, &fused_add_rms_norm_fwd);
  ops.impl("fused_add_rms_norm_fwd", torch::dispatch(c10::DispatchKey::Autograd, &fused_add_rms_norm_fwd_autograd));
  ops.def(
      "rms_norm_bwd(Tensor grad_out, Tensor? grad_residual, Tensor input, Tensor? weight, float eps, "
      "bool single_rounding) -> (Tensor, Tensor)");
  ops.impl("rms_norm_bwd", c10::kCUDA, &rms_norm_bwd);
  ops.impl("rms_norm_bwd", c10::kCPU, &rms_norm_bwd);
}
