// Module: parameter registration, hierarchical names, dtype conversion, train/eval.
#include "tapegrad/nn/module.hpp"

#include "tapegrad/error.hpp"

namespace tapegrad::nn {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  t.requires_grad_(true);
  t.impl()->name = name;
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(Tensor t) {
  buffers_.push_back(t);
  return t;
}

void Module::collect(const std::string& prefix, ParamList& out) const {
  for (const auto& [name, t] : params_) {
    t.impl()->name = prefix + name;  // tape dumps show the full path
    out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

ParamList Module::named_parameters() const {
  ParamList out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out = buffers_;
  for (const auto& [name, child] : children_)
    for (const Tensor& t : child->buffers()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

namespace {
// Replaces t's storage with a converted copy; every handle to t sees the new dtype.
void convert_in_place(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return;
  const Tensor c = t.to(dtype);
  TensorImpl& im = *t.impl();
  im.storage = c.impl()->storage;
  im.offset = 0;
  im.strides = contiguous_strides(im.shape);
  im.dtype = dtype;
  im.grad = Tensor();
}
}  // namespace

void Module::to(DType dtype) {
  for (auto& [name, t] : params_) convert_in_place(t, dtype);
  for (auto& t : buffers_) convert_in_place(t, dtype);
  for (auto& [name, child] : children_) child->to(dtype);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

}  // namespace tapegrad::nn
