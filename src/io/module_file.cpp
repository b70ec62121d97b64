// nn::save and nn::load (declared in io.hpp): a module's parameters as one .safetensors file, under
// their dotted names. The format is the io layer's, which sits above nn, so the definitions live
// here and include nn downwards. Loading is strict and all-or-nothing: every check (each parameter
// present with its dtype and shape, nothing else in the file) runs before the first value is copied,
// so a refused file leaves the module as it was.
#include <algorithm>

#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/nn/module.hpp"

namespace tapegrad::nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  io::save_safetensors(path, module.named_parameters(), metadata);
}

void load(Module& module, const io::SafetensorsFile& file) {
  const ParamList params = module.named_parameters();
  for (const auto& [name, p] : params) {
    const Tensor* t = file.find(name);
    if (!t)
      throw IoError(file.path + ": no tensor " + name + ", a parameter of the module (" + p.describe() +
                    "); the file holds " + std::to_string(file.tensors.size()) + " tensors for the module's " +
                    std::to_string(params.size()) + " parameters");
    if (t->dtype() != p.dtype() || t->shape() != p.shape())
      throw IoError(file.path + ": tensor " + name + " is " + t->describe() + ", the module's parameter is " +
                    p.describe());
  }
  for (const auto& [name, t] : file.tensors)
    if (std::none_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; }))
      throw IoError(file.path + ": tensor " + name + " is not a parameter of the module");
  for (const auto& [name, p] : params) {
    Tensor dst = p;
    dst.copy_from(*file.find(name));
  }
}

void load(Module& module, const std::string& path) { load(module, io::load_safetensors(path)); }

}  // namespace tapegrad::nn
