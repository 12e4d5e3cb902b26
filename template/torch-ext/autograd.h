// Autograd helpers shared by every op's binding (torch-ext/<stem>.cpp). Each differentiable functional op
// (<op>_fwd) has a kernel at the Autograd dispatch key,
//   ops.impl("<op>_fwd", torch::dispatch(c10::DispatchKey::Autograd, &<op>_fwd_autograd));
// that calls the op below autograd (call_below_autograd) and, when the call records a graph (records_graph: grad
// mode on and an argument requiring grad), records it (record_graph): a graph node whose backward calls the backward
// op. Both calls go through the dispatcher (never the C++ functions directly), so that torch.compile (fake tensors)
// and opcheck trace them. Registered in C++, the formula puts no Python on the path of a call, with or without
// gradients. Header-only, as checks.h.
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

// TORCH_EXTENSION_NAME (this build's op namespace, a bare identifier set by the build) as a string literal.
#define CKT_STRINGIFY_(x) #x
#define CKT_STRINGIFY(x) CKT_STRINGIFY_(x)

namespace ckt::autograd {

// Ops written as a torch::autograd::Function (tools/new_op.py made them so before 2026-12-02) keep compiling.
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline constexpr const char* kNamespace = CKT_STRINGIFY(TORCH_EXTENSION_NAME);

// The op `name` of this extension, typed like `impl`, its C++ implementation (only its type is used: the handle
// calls the op through the dispatcher). The lookup is by name: keep the handle in a function-local static,
//   static const auto fwd = ckt::autograd::op(&rms_norm_fwd, "rms_norm_fwd");
template <typename Return, typename... Args>
c10::TypedOperatorHandle<Return(Args...)> op(Return (* /*impl*/)(Args...), const char* name) {
  const std::string qualified = std::string(kNamespace) + "::" + name;
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "").typed<Return(Args...)>();
}

// Calls `handle` below the autograd keys: what an Autograd kernel does first, so that the call does not come back to
// the autograd kernel that is running it.
template <typename Signature, typename... Args>
decltype(auto) call_below_autograd(const c10::TypedOperatorHandle<Signature>& handle, Args&&... args) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return handle.call(std::forward<Args>(args)...);
}

// Whether a call with these arguments records a graph: grad mode is on and a tensor argument requires grad. When
// it does not (inference, frozen weights), an op's Autograd kernel records no node (record_graph), which would
// allocate a graph node and save tensors for nothing.
inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const std::optional<at::Tensor>& t) { return t && requires_grad(*t); }
template <typename T> bool requires_grad(const T&) { return false; }  // eps, flags, sizes
template <typename... Args> bool records_graph(const Args&... args) {
  return at::GradMode::is_enabled() && (requires_grad(args) || ...);
}

// An optional tensor argument as a saved (possibly undefined) tensor, and back.
inline at::Tensor saved(const std::optional<at::Tensor>& t) { return t.value_or(at::Tensor()); }
inline std::optional<at::Tensor> as_optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Graph nodes are held by std::shared_ptr in older torch (2.11) and by c10::intrusive_ptr in newer (2.14): what
// Tensor::grad_fn() returns tells which; the node below is written for both.
using NodePtr = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;
inline constexpr bool kIntrusiveNodes = !std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>;

// A tensor a node keeps for its backward: an argument, or one of the call's outputs (kept without the reference
// cycle output -> node -> output, as torch's own nodes keep theirs).
struct Saved {
  at::Tensor tensor;
  bool is_output = false;
};

// The node of one recorded call (see record_graph). Its backward gets the outputs' gradients (one the graph did not
// reach comes as zeros, as a torch::autograd::Function materializes it) and the saved tensors (unpacked: one changed
// in place since the call raises torch's error), and returns the gradients of record_graph's `inputs`, in order.
template <size_t N, typename Backward> struct GraphNode final : torch::autograd::Node {
  GraphNode(const char* name, Backward backward) : name_(name), backward_(std::move(backward)) {}

  std::string name() const override { return name_; }
  void release_variables() override {
    for (auto& s : saved) s.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) grads[i] = input_metadata(i).zeros_like();
    }
    std::array<at::Tensor, N> tensors;
    for (size_t i = 0; i < N; ++i) tensors[i] = saved[i].unpack(self());
    return backward_(static_cast<const torch::autograd::Node&>(*this), grads, tensors);
  }

  std::array<torch::autograd::SavedVariable, N> saved;

 private:
  auto self() {
    if constexpr (kIntrusiveNodes) {
      return NodePtr(c10::intrusive_ptr<GraphNode>::reclaim_copy(this));
    } else {
      return this->shared_from_this();
    }
  }
  const char* name_;
  Backward backward_;
};

// Records a call that records a graph (records_graph): a node named `name` becomes the grad_fn of every output, its
// edges lead to `inputs` (the differentiable arguments, in the order `backward` returns their gradients; undefined
// or not requiring grad: no edge), and it keeps `saved` for the backward, called as
//   backward(const torch::autograd::Node& node, variable_list& grads, std::array<at::Tensor, N>& saved)
// (node.task_should_compute_output(i): whether input i's gradient is wanted). Scalars the backward needs are captured
// by the lambda. What torch's own generated code does for its ops; a torch::autograd::Function (a context per call,
// its scalars in a map of names) took several µs more host time per call (docs/benchmarks.md).
template <size_t N, typename Backward>
void record_graph(const char* name, std::initializer_list<at::Tensor> inputs, std::initializer_list<at::Tensor> outputs,
                  const Saved (&saved)[N], Backward backward) {
  using G = GraphNode<N, Backward>;
  auto node = [&] {
    if constexpr (kIntrusiveNodes) {
      return c10::make_intrusive<G>(name, std::move(backward));
    } else {
      return std::shared_ptr<G>(new G(name, std::move(backward)), [](G* n) { deleteNode(n); });  // (torch's deleter)
    }
  }();
  torch::autograd::edge_list edges;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(!t.defined() || !t._fw_grad(0).defined(), name, ": forward-mode AD (dual tensors) is not supported");
    edges.push_back(t.defined() ? torch::autograd::impl::gradient_edge(t) : torch::autograd::Edge());
  }
  node->set_next_edges(std::move(edges));
  const NodePtr handle(node);
  for (const at::Tensor& t : outputs) torch::autograd::set_history(t, handle);
  for (size_t i = 0; i < N; ++i) node->saved[i] = torch::autograd::SavedVariable(saved[i].tensor, saved[i].is_output);
}

}  // namespace ckt::autograd
