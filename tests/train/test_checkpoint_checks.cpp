// Loading validates before it allocates: a real tiny checkpoint is written, then its metadata or
// tensors are rewritten the way a corrupt or hostile file would have them, and each load must fail
// with an IoError naming the file and the field or tensor, before any model of the claimed size is built.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

train::TrainOptions tiny_run(const std::string& out_dir) {
  train::TrainOptions o;
  o.model.kind = models::ModelKind::transformer;
  o.model.d_model = 32, o.model.layers = 1, o.model.heads = 2, o.model.d_ff = 64, o.model.max_len = 64;
  o.task = "reverse";
  o.task_options = {3, 6, 5};
  o.steps = 2, o.batch_size = 4, o.valid_size = 4, o.eval_every = 0, o.threads = 1;
  o.out_dir = out_dir;
  return o;
}

// A checkpoint directory written by a real two-step training run, made once and copied per case.
const std::string& pristine() {
  static const std::string dir = [] {
    const fs::path p = fs::temp_directory_path() / ("tapegrad-ckcheck-" + std::to_string(::getpid()));
    fs::remove_all(p);
    train::Session s = train::make_session(tiny_run(p.string()));
    train::train(s, nullptr, nullptr);
    return p.string();
  }();
  return dir;
}

// A fresh copy of the checkpoint with `file` (model or optimizer) rewritten by `edit`.
std::string rewritten(const std::string& name, const std::string& file,
                      const std::function<void(io::SafetensorsFile&)>& edit) {
  const fs::path dir =
      fs::temp_directory_path() / ("tapegrad-ckcheck-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(pristine(), dir, fs::copy_options::recursive);
  const std::string path = (dir / file).string();
  io::SafetensorsFile f = io::load_safetensors(path);
  edit(f);
  io::save_safetensors(path, f.tensors, f.metadata);
  return dir.string();
}

// The model file's config with one field replaced.
std::function<void(io::SafetensorsFile&)> set_config(const char* key, const nlohmann::json& value) {
  return [=](io::SafetensorsFile& f) {
    nlohmann::json c = nlohmann::json::parse(f.metadata.at("config"));
    c[key] = value;
    f.metadata["config"] = c.dump();
  };
}

train::Session resume(const std::string& dir) {
  train::TrainOptions o = tiny_run("");
  o.resume_dir = dir;
  o.out_dir = dir;
  return train::make_session(o);
}

}  // namespace

TEST_CASE("a checkpoint's config must match its tensors before a model is built", "[checkpoint][sizes]") {
  REQUIRE_NOTHROW(train::load_checkpoint(pristine()));
  REQUIRE_NOTHROW(train::check_model_loadable(io::load_safetensors(pristine() + "/model.safetensors")));
  const std::string model_file = "model.safetensors";
  const int64_t huge = int64_t(1) << 62;
  struct Row {
    const char* name;
    const char* key;
    nlohmann::json value;
    std::string message;
  };
  const Row rows[] = {
      {"max-len", "max_len", huge,
       "metadata 'config': max_len 4611686018427387904: at most 1048576 positions"},
      {"d-ff", "d_ff", huge,
       "metadata 'config': d_ff 4611686018427387904 does not match tensor encoder.layers.0.ff.linear1.weight "
       "[64,32], "
       "which implies 64"},
      {"d-model", "d_model", huge,
       "metadata 'config': d_model 4611686018427387904 does not match tensor src_embed.weight"},
      {"layers", "layers", 1000000000,
       "metadata 'config': layers 1000000000 does not match the tensors, which hold 1 encoder layers"},
      {"heads", "heads", 3, "metadata 'config': d_model 32: not divisible by heads 3"},
      {"negative", "d_model", -32, "metadata 'config': d_model -32: must be positive"},
      {"float", "layers", 1.5, "field 'layers' is 1.5; expected a 64-bit integer"},
      {"unsigned", "d_ff", nlohmann::json(std::numeric_limits<uint64_t>::max()),
       "field 'd_ff' is 18446744073709551615"},
      // Shapes all agree but the pre-LN final norms are missing: caught by the parameter count.
      {"norm-first", "norm_first", true, "describes a model of"},
      // Sinusoidal tables are not stored: 2 x 2^20 x 32 positions would be 768 MB from a tiny file.
      {"tables", "max_len", int64_t(1) << 20, "max_len 1048576: the position tables would need 768.0 MB"},
  };
  for (const Row& r : rows) {
    CAPTURE(r.name);
    const std::string dir = rewritten(r.name, model_file, set_config(r.key, r.value));
    CHECK_THROWS_AS(train::load_checkpoint(dir), IoError);
    CHECK_THROWS_WITH(train::load_checkpoint(dir),
                      Catch::StartsWith(dir + "/model.safetensors: ") && Catch::Contains(r.message));
    CHECK_THROWS_WITH(resume(dir), Catch::Contains(r.message));
    // The same check without building anything.
    CHECK_THROWS_WITH(train::check_model_loadable(io::load_safetensors(dir + "/" + model_file)),
                      Catch::Contains(r.message));
    fs::remove_all(dir);
  }
}

TEST_CASE("non-finite parameters and optimizer moments are refused by tensor name", "[checkpoint]") {
  auto poison = [](const std::string& tensor, double value) {
    return [=](io::SafetensorsFile& f) {
      for (auto& [name, t] : f.tensors)
        if (name == tensor) t.data<float>()[3] = float(value);
    };
  };
  std::string dir =
      rewritten("nan-weight", "model.safetensors", poison("encoder.layers.0.ff.linear2.bias", NAN));
  CHECK_THROWS_WITH(
      train::load_checkpoint(dir),
      Catch::Contains(
          "model.safetensors: parameter encoder.layers.0.ff.linear2.bias holds nan at element 3"));
  fs::remove_all(dir);
  dir = rewritten("inf-weight", "model.safetensors", poison("out_proj.weight", INFINITY));
  CHECK_THROWS_WITH(train::load_checkpoint(dir),
                    Catch::Contains("parameter out_proj.weight holds inf at element 3"));
  fs::remove_all(dir);
  dir = rewritten("nan-moment", "optimizer.safetensors", poison("exp_avg.src_embed.weight", NAN));
  CHECK_THROWS_WITH(
      resume(dir),
      Catch::Contains("optimizer.safetensors: optimizer state exp_avg.src_embed.weight holds nan"));
  fs::remove_all(dir);
  dir = rewritten("negative-moment", "optimizer.safetensors", poison("exp_avg_sq.src_embed.weight", -1.0));
  CHECK_THROWS_WITH(resume(dir),
                    Catch::Contains("exp_avg_sq.src_embed.weight holds a negative second moment"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint metadata is parsed strictly", "[checkpoint]") {
  auto set_meta = [](const char* key, const std::string& value) {
    return [=](io::SafetensorsFile& f) { f.metadata[key] = value; };
  };
  for (const std::string bad :
       {"-1", " 20", "20 ", "+3", "0x10", "", "99999999999999999999", "9223372036854775808"}) {
    CAPTURE(bad);
    std::string dir = rewritten("step", "model.safetensors", set_meta("step", bad));
    CHECK_THROWS_WITH(train::load_checkpoint(dir),
                      Catch::Contains("model.safetensors: metadata 'step' is '" + bad + "'"));
    CHECK_THROWS_WITH(train::check_model_loadable(io::load_safetensors(dir + "/model.safetensors")),
                      Catch::Contains("model.safetensors: metadata 'step' is '" + bad + "'"));
    fs::remove_all(dir);
    dir = rewritten("opt-step", "optimizer.safetensors", set_meta("step", bad));
    CHECK_THROWS_WITH(resume(dir),
                      Catch::Contains("optimizer.safetensors: metadata 'step' is '" + bad + "'"));
    fs::remove_all(dir);
  }
  for (const std::string bad :
       {"1,2,3", "1,2,3,4,5", "1, 2,3,4", "1,2,3,18446744073709551616", "1,2,,4", "1,2,3,-4"}) {
    CAPTURE(bad);
    const std::string dir = rewritten("generator", "optimizer.safetensors", set_meta("generator", bad));
    CHECK_THROWS_WITH(resume(dir), Catch::Contains("optimizer.safetensors: metadata 'generator'"));
    fs::remove_all(dir);
  }
  std::string dir = rewritten("zero-generator", "optimizer.safetensors", set_meta("generator", "0,0,0,0"));
  CHECK_THROWS_WITH(resume(dir), Catch::Contains("metadata 'generator' is all zero"));
  fs::remove_all(dir);
  dir = rewritten("no-format", "optimizer.safetensors",
                  [](io::SafetensorsFile& f) { f.metadata.erase("format"); });
  CHECK_THROWS_WITH(resume(dir), Catch::Contains("optimizer.safetensors: metadata has no 'format' entry"));
  fs::remove_all(dir);
  // The largest words are valid state: exact uint64 parsing, no saturation.
  dir = rewritten("max-generator", "optimizer.safetensors",
                  set_meta("generator", "18446744073709551615,1,2,18446744073709551614"));
  CHECK(resume(dir).model->generator().state() ==
        std::vector<uint64_t>{18446744073709551615ull, 1, 2, 18446744073709551614ull});
  fs::remove_all(dir);
  dir = rewritten("vocab", "model.safetensors", set_meta("vocab", "[\"<pad>\", "));
  CHECK_THROWS_WITH(
      train::load_checkpoint(dir),
      Catch::StartsWith(dir + "/model.safetensors: metadata 'vocab': ") && Catch::Contains("not valid JSON"));
  fs::remove_all(dir);
  dir = rewritten("options", "model.safetensors", [](io::SafetensorsFile& f) {
    nlohmann::json o = nlohmann::json::parse(f.metadata.at("options"));
    o["seed"] = -1;
    f.metadata["options"] = o.dump();
  });
  CHECK_THROWS_WITH(train::load_checkpoint(dir),
                    Catch::StartsWith(dir + "/model.safetensors: metadata 'options': ") &&
                        Catch::Contains("field 'seed' is -1"));
  fs::remove_all(dir);
}
