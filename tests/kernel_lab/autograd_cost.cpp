// Host cost of recording an op in the autograd graph (tests/kernel_lab/autograd_cost.py builds and times it, CPU
// only): a trivial op "hx::fwd" at the CPU key, and two Autograd kernels over it: a torch::autograd::Function with
// its context's saved_data map (fwdf: how the bindings recorded ops before 2026-12-02) and a graph node recorded as
// torch's generated code does (fwdn: what autograd.h's record_graph does). Written for torch with intrusive_ptr
// nodes (2.14 here).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>
#include <torch/python.h>
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
at::Tensor fwd_impl(const at::Tensor& x, const std::optional<at::Tensor>& w, double eps) { return at::empty_like(x); }
std::tuple<at::Tensor, at::Tensor> bwd_impl(const at::Tensor& g, const at::Tensor& x,
                                            const std::optional<at::Tensor>& w, double eps) {
  return {at::empty_like(x), w ? at::empty_like(*w) : at::Tensor()};
}
static c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double)> fwd_op() {
  static auto h = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("hx::fwd", "")
                      .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double)>();
  return h;
}
static c10::TypedOperatorHandle<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                   const std::optional<at::Tensor>&, double)>
bwd_op() {
  static auto h = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("hx::bwd", "")
                      .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                const std::optional<at::Tensor>&, double)>();
  return h;
}
struct Fn : torch::autograd::Function<Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const std::optional<at::Tensor>& w, double eps) {
    at::AutoDispatchBelowADInplaceOrView g;
    at::Tensor out = fwd_op().call(x, w, eps);
    ctx->save_for_backward({x, w.value_or(at::Tensor())});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["single_rounding"] = false;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    auto [gi, gw] = bwd_op().call(grads[0], s[0], s[1].defined() ? std::optional<at::Tensor>(s[1]) : std::nullopt,
                                  ctx->saved_data["eps"].toDouble());
    return {gi, s[1].defined() ? gw : at::Tensor(), at::Tensor()};
  }
};
struct HxNode : torch::autograd::Node {
  torch::autograd::SavedVariable x_, w_;
  double eps = 0;
  variable_list apply(variable_list&& grads) override {
    at::Tensor x = x_.unpack(c10::intrusive_ptr<torch::autograd::Node>::reclaim_copy(this)),
               w = w_.unpack(c10::intrusive_ptr<torch::autograd::Node>::reclaim_copy(this));
    auto [gi, gw] = bwd_op().call(grads[0], x, w.defined() ? std::optional<at::Tensor>(w) : std::nullopt, eps);
    return {gi, w.defined() ? gw : at::Tensor()};
  }
  void release_variables() override {
    x_.reset_data();
    w_.reset_data();
  }
  std::string name() const override { return "HxBackward"; }
};
at::Tensor fwd_function(const at::Tensor& x, const std::optional<at::Tensor>& w, double eps) {
  return Fn::apply(x, w, eps);
}
at::Tensor fwd_node(const at::Tensor& x, const std::optional<at::Tensor>& w, double eps) {
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView g;
    out = fwd_op().call(x, w, eps);
  }
  const at::Tensor wt = w.value_or(at::Tensor());
  if (at::GradMode::is_enabled() && (x.requires_grad() || (wt.defined() && wt.requires_grad()))) {
    auto node = c10::make_intrusive<HxNode>();
    node->set_next_edges(torch::autograd::collect_next_edges(x, wt));
    node->x_ = torch::autograd::SavedVariable(x, false);
    node->w_ = torch::autograd::SavedVariable(wt, false);
    node->eps = eps;
    torch::autograd::set_history(out, node);
  }
  return out;
}
TORCH_LIBRARY(hx, m) {
  m.def("fwd(Tensor x, Tensor? w, float eps) -> Tensor");
  m.def("bwd(Tensor g, Tensor x, Tensor? w, float eps) -> (Tensor, Tensor)");
  m.def("fwdf(Tensor x, Tensor? w, float eps) -> Tensor");
  m.def("fwdn(Tensor x, Tensor? w, float eps) -> Tensor");
  m.impl("fwd", c10::DispatchKey::CPU, &fwd_impl);
  m.impl("bwd", c10::DispatchKey::CPU, &bwd_impl);
  m.impl("fwdf", c10::DispatchKey::Autograd, &fwd_function);
  m.impl("fwdn", c10::DispatchKey::Autograd, &fwd_node);
  m.impl("fwdf", c10::DispatchKey::CPU, &fwd_impl);
  m.impl("fwdn", c10::DispatchKey::CPU, &fwd_impl);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
