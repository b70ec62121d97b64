// The fuzz targets: one function per input format, each taking arbitrary bytes. A target returns
// normally when the input is handled, whether it was accepted or refused with a tapegrad::Error;
// anything else (another exception, a crash, a sanitizer report, a broken invariant, which aborts)
// is a finding. The same functions run under libFuzzer (fuzz_main.cpp, `tools/run fuzz`) and from the
// replay suite (test_fuzz_replay.cpp), which feeds them every stored corpus and regression input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tapegrad::fuzz {

// safetensors bytes -> io::load_safetensors_bytes; accepted files must survive a save/load round trip.
void safetensors(const uint8_t* data, size_t size);
// A checkpoint directory (model + optimizer file, see checkpoint_input below) -> train::make_session
// with --resume, which runs load_checkpoint (config, vocabulary, options metadata) and restores the
// optimizer state and generator.
void checkpoint(const uint8_t* data, size_t size);
// TSV bytes -> data::read_tsv with both tokenizations, then the vocabulary and encoding built from it.
void tsv(const uint8_t* data, size_t size);
// Vocabulary JSON -> data::Vocab::from_json; accepted vocabularies must survive to_json/from_json.
void vocab(const uint8_t* data, size_t size);

// The checkpoint target's input: the two files' JSON headers and data sections, separated by
// kCheckpointSeparator, so that mutations of the header text (which change its length) still reach
// the metadata checks instead of all failing at the 8-byte length field, which the target writes.
inline constexpr std::string_view kCheckpointSeparator = "\n@@tapegrad-fuzz-part@@\n";
struct CheckpointParts {
  std::string model_header, model_data, optimizer_header, optimizer_data;
};
CheckpointParts split_checkpoint_input(std::string_view input);
std::string join_checkpoint_input(const CheckpointParts& parts);
// A safetensors file from its header text and data section (the length field prepended).
std::string safetensors_from_parts(std::string_view header, std::string_view data);

// Aborts with `what` when an invariant of an accepted input does not hold: the fuzzer records the input.
void require(bool ok, const char* what);

// A directory private to this process for the files a target must hand to a path-based reader,
// under $TMPDIR (default /tmp); created on first use.
const std::string& scratch_dir();
void write_file(const std::string& path, std::string_view bytes);

struct Target {
  const char* name;
  void (*run)(const uint8_t*, size_t);
};
// Every target, named as its folder under tests/fuzz/corpus and tests/fuzz/regressions.
const std::vector<Target>& all_targets();

}  // namespace tapegrad::fuzz
