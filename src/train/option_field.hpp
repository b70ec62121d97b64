// The field behind a row of the option table (OptionSpec::Field): how the row reads, checks, copies
// and stores its TrainOptions field. Defined by the field types in option_table.cpp, used through
// this interface by the generated code in options.cpp (validate, the resume comparison, JSON).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tapegrad/train.hpp"

namespace tapegrad::train {

using Json = nlohmann::json;

// What a row knows about its field's type; set() and check() add the flag to the messages.
struct OptionSpec::Field {
  virtual ~Field() = default;
  virtual std::string text(const TrainOptions& o) const = 0;
  // Parses command-line text; false when it is not a value of the type (then set() reports the range).
  virtual bool parse(TrainOptions& o, const std::string& text) const = 0;
  virtual bool in_range(const TrainOptions& o) const = 0;
  virtual std::string expected() const = 0;
  virtual void copy(const TrainOptions& from, TrainOptions& to) const = 0;
  virtual Json json(const TrainOptions& o) const = 0;
  // Reads the JSON value; returns "" or what was expected of its type ("an integer").
  virtual std::string read(TrainOptions& o, const Json& v) const = 0;
};

}  // namespace tapegrad::train
