// Autograd helpers shared by every op's binding (torch-ext/<stem>.cpp). Each differentiable functional op
// (<op>_fwd) has a kernel at the Autograd dispatch key,
//   ops.impl("<op>_fwd", torch::dispatch(c10::DispatchKey::Autograd, &<op>_fwd_autograd));
// that calls the op straight below autograd when the call records no graph (records_graph false: no grad mode, or
// no argument requiring grad) and otherwise goes through the op's torch::autograd::Function (apply()). The
// Function's forward calls the op below autograd and its backward calls the backward op, both through the
// dispatcher (never the C++ functions directly), so that torch.compile (fake tensors) and opcheck trace them.
// Registered in C++, the formula puts no Python on the path of a call, with or without gradients. Header-only, as
// checks.h.
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <string>

// TORCH_EXTENSION_NAME (this build's op namespace, a bare identifier set by the build) as a string literal.
#define CKT_STRINGIFY_(x) #x
#define CKT_STRINGIFY(x) CKT_STRINGIFY_(x)

namespace ckt::autograd {

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

// Calls `handle` below the autograd keys: what a Function's forward does, so that the call does not come back to
// the autograd kernel that is running it.
template <typename Signature, typename... Args>
decltype(auto) call_below_autograd(const c10::TypedOperatorHandle<Signature>& handle, Args&&... args) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return handle.call(std::forward<Args>(args)...);
}

// Whether a call with these arguments records a graph: grad mode is on and a tensor argument requires grad. When
// it does not (inference, frozen weights), an op's Autograd kernel calls the op below autograd at once instead of
// through its Function, which would allocate a graph node and save tensors for nothing.
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

}  // namespace ckt::autograd
