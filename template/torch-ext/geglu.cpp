// Torch binding of GEGLU: argument checks with messages a user can act on, device guard, current stream,
// launch, and the autograd formula. register_geglu(ops) defines its ops; torch_binding.cpp calls it.
#include "geglu.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

#include "autograd.h"
#include "checks.h"
#include "torch_binding.h"

using namespace ckt::checks;
using ckt::autograd::variable_list;

namespace {

// diffusers GEGLU on its projection's output: input [..., 2 * inner] = [value | gate], out [..., inner].
void geglu(at::Tensor& out, const at::Tensor& input, bool tanh_approx) {
  check_tensor(input, "input", input);
  check_tensor(out, "out", input);
  const at::Tensor x = readable_rows(input, "input");
  const int64_t width = input.size(-1), inner = width / 2;
  check(width % 2 == 0, "input's last dimension must be even (the value half, then the gate half), got ", width);
  std::vector<int64_t> expected = input.sizes().vec();
  expected.back() = inner;
  check(out.sizes() == at::IntArrayRef(expected), "out has shape ", out.sizes(), " but must have shape ",
        at::IntArrayRef(expected), " (the input's, with the last dimension halved)");
  check_last_dim_contiguous(out, "out");
  check_writable(out, "out");
  check_no_overlap(out, "out", input, "input", false);
  const int64_t rows = row_count(input);
  if (rows == 0 || inner == 0) return;

  const c10::cuda::CUDAGuard guard(input.device());
  const OutputRows y(out);
  ckt::GegluArgs args{};
  args.out = y.target.data_ptr();
  args.input = x.data_ptr();
  args.rows = rows;
  args.inner = inner;
  args.out_rows = row_offsets(y.target);
  args.input_rows = row_offsets(x);
  args.tanh = tanh_approx;
  check_launch(ckt::geglu(dtype_of(input, "input"), args, c10::cuda::getCurrentCUDAStream()), "geglu");
  y.finish();
}

at::Tensor geglu_fwd(const at::Tensor& input, bool tanh_approx) {
  std::vector<int64_t> shape = input.sizes().vec();
  if (!shape.empty()) shape.back() /= 2;
  at::Tensor out = at::empty(shape, input.options());
  geglu(out, input, tanh_approx);
  return out;
}

// Gradient of geglu(input) given grad_out: [grad of value | grad of gate], input's shape.
at::Tensor geglu_bwd(const at::Tensor& grad_out_in, const at::Tensor& input, bool tanh_approx) {
  check_tensor(input, "input", input);
  const at::Tensor grad_out = gradient_rows(grad_out_in);
  check_tensor(grad_out, "grad_out", input);
  const at::Tensor x = readable_rows(input, "input");
  const int64_t width = input.size(-1), inner = width / 2;
  check(width % 2 == 0, "input's last dimension must be even (the value half, then the gate half), got ", width);
  std::vector<int64_t> expected = input.sizes().vec();
  expected.back() = inner;
  check(grad_out.sizes() == at::IntArrayRef(expected), "grad_out has shape ", grad_out.sizes(), " but must have shape ",
        at::IntArrayRef(expected));
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  const int64_t rows = row_count(input);
  if (rows == 0 || inner == 0) return grad_input.zero_();

  const c10::cuda::CUDAGuard guard(input.device());
  ckt::GegluArgs args{};
  args.out = grad_input.data_ptr();
  args.input = x.data_ptr();
  args.grad_out = grad_out.data_ptr();
  args.rows = rows;
  args.inner = inner;
  args.out_rows = row_offsets(grad_input);
  args.input_rows = row_offsets(x);
  args.grad_out_rows = row_offsets(grad_out);
  args.tanh = tanh_approx;
  check_launch(ckt::geglu(dtype_of(input, "input"), args, c10::cuda::getCurrentCUDAStream()), "geglu_bwd");
  return grad_input;
}

at::Tensor geglu_fwd_autograd(const at::Tensor& input, bool tanh_approx) {
  static const auto fwd = ckt::autograd::op(&geglu_fwd, "geglu_fwd");
  at::Tensor out = ckt::autograd::call_below_autograd(fwd, input, tanh_approx);
  if (ckt::autograd::records_graph(input)) {
    ckt::autograd::record_graph("GegluBackward", {input}, {out}, {{input}},
                                [tanh_approx](const auto&, variable_list& grads, auto& saved) {
                                  static const auto bwd = ckt::autograd::op(&geglu_bwd, "geglu_bwd");
                                  return variable_list{bwd.call(grads[0], saved[0], tanh_approx)};
                                });
  }
  return out;
}

}  // namespace

void register_geglu(torch::Library& ops) {
  ops.def("geglu(Tensor! out, Tensor input, bool tanh_approx) -> ()");
  ops.impl("geglu", c10::kCUDA, &geglu);
  ops.impl("geglu", c10::kCPU, &geglu);  // only to say, in one line, that inputs must be on the GPU
  ops.def("geglu_fwd(Tensor input, bool tanh_approx) -> Tensor");
  ops.impl("geglu_fwd", c10::kCUDA, &geglu_fwd);
  ops.impl("geglu_fwd", c10::kCPU, &geglu_fwd);
  ops.impl("geglu_fwd", torch::dispatch(c10::DispatchKey::Autograd, &geglu_fwd_autograd));
  ops.def("geglu_bwd(Tensor grad_out, Tensor input, bool tanh_approx) -> Tensor");
  ops.impl("geglu_bwd", c10::kCUDA, &geglu_bwd);
  ops.impl("geglu_bwd", c10::kCPU, &geglu_bwd);
}
