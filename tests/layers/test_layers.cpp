// The layers, enforced: every #include in the library, the tools, the examples and the experiments
// points the way the layer table in docs/architecture.md allows. The table is read from the doc
// itself (its folder and may-include columns), so the doc and this check cannot drift apart: a new
// folder, a stale path or a table that points up fails here as surely as a wrong include does.
// tests/ and bench/ may include anything below them and are not scanned.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = TAPEGRAD_SOURCE_DIR;
const char* const kDoc = "docs/architecture.md";
// The folders whose files are checked.
const std::vector<std::string> kScanned = {"kernels", "src", "include", "experiments", "tools", "examples", "python"};

std::string slurp(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), blank));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), blank).base(), s.end());
  return s;
}

// One row of the table: the layer, the paths that make it up (a folder ends in '/'), and what its
// files may include besides its own layer.
struct Layer {
  std::string name;
  int rank = 0;  // its row, bottom up: includes point to a lower rank
  std::vector<std::string> paths;
  std::set<std::string> may_include;  // layer names
  bool public_headers = false;        // also any include/tapegrad/ header of a layer below
};

struct LayerTable {
  std::vector<Layer> layers;
  std::vector<std::string> errors;  // problems with the table itself

  const Layer* find(const std::string& name) const {
    for (const Layer& l : layers)
      if (l.name == name) return &l;
    return nullptr;
  }
  // The layer of a project-relative path: the row with the longest matching path, or null.
  const Layer* layer_of(const std::string& path) const {
    const Layer* best = nullptr;
    size_t best_len = 0;
    for (const Layer& l : layers)
      for (const std::string& p : l.paths) {
        const bool match = p.back() == '/' ? path.rfind(p, 0) == 0 : path == p;
        if (match && p.size() > best_len) best = &l, best_len = p.size();
      }
    return best;
  }
};

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {  // past the leading '|'
    if (line[i] == '|') {
      out.push_back(trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}

std::vector<std::string> backticked(const std::string& s) {
  std::vector<std::string> out;
  const std::regex tick("`([^`]+)`");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), tick); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// Reads the table under "## The layers": the columns `layer`, `folder` and `may include`. In the
// folder column a bare header name is one of include/tapegrad/; the may-include column lists
// layers, `everything below`, `public headers` (the include/tapegrad/ headers of the layers below)
// or `nothing`.
LayerTable read_table(const std::string& doc) {
  LayerTable t;
  std::istringstream in(doc);
  std::string line;
  bool in_section = false;
  int col_layer = -1, col_folder = -1, col_may = -1;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## The layers";
    if (!in_section || line.rfind("|", 0) != 0) continue;
    const std::vector<std::string> c = cells(line);
    if (col_layer < 0) {  // the header row
      for (int i = 0; i < int(c.size()); ++i) {
        if (c[size_t(i)] == "layer") col_layer = i;
        if (c[size_t(i)] == "folder") col_folder = i;
        if (c[size_t(i)] == "may include") col_may = i;
      }
      if (col_layer < 0 || col_folder < 0 || col_may < 0) {
        t.errors.push_back(std::string(kDoc) + ": the layer table needs columns 'layer', 'folder' and 'may include'");
        return t;
      }
      continue;
    }
    if (c.empty() || c[0].find_first_not_of("-: ") == std::string::npos) continue;  // the |---| row
    rows.push_back(c);
  }
  if (col_layer < 0) t.errors.push_back(std::string(kDoc) + ": no layer table under '## The layers'");
  for (const auto& c : rows) {
    const int need = std::max({col_layer, col_folder, col_may});
    if (int(c.size()) <= need) {
      t.errors.push_back(std::string(kDoc) + ": layer table row '" + (c.empty() ? "" : c[0]) + "' has too few cells");
      continue;
    }
    Layer l;
    l.name = c[size_t(col_layer)];
    l.rank = int(t.layers.size());
    for (std::string p : backticked(c[size_t(col_folder)]))
      l.paths.push_back(p.find('/') == std::string::npos ? "include/tapegrad/" + p : p);
    std::string may = c[size_t(col_may)];
    may.erase(std::remove(may.begin(), may.end(), '`'), may.end());
    std::istringstream items(may);
    std::string item;
    while (std::getline(items, item, ',')) {
      item = trim(item);
      if (item == "nothing") continue;
      if (item == "public headers") {
        l.public_headers = true;
      } else if (item == "everything below") {
        for (const Layer& below : t.layers) l.may_include.insert(below.name);
      } else if (const Layer* below = t.find(item)) {
        l.may_include.insert(below->name);
      } else {
        t.errors.push_back(std::string(kDoc) + ": layer " + l.name + " may include '" + item +
                           "', which is no layer above its row (includes point down only)");
      }
    }
    t.layers.push_back(l);
  }
  return t;
}

const LayerTable& table() {
  static const LayerTable t = read_table(slurp(kRoot / kDoc));
  return t;
}

// Where `#include "name"` (or <name>) in `file` lands in the project, as the compiler searches
// (the includer's folder for quotes, then include/ and the project root); empty if outside it.
std::string resolve(const std::string& file, const std::string& name, bool quoted) {
  std::vector<fs::path> candidates;
  if (quoted) candidates.push_back(fs::path(file).parent_path() / name);
  candidates.push_back(fs::path("include") / name);
  candidates.push_back(fs::path(name));
  for (const fs::path& c : candidates)
    if (fs::is_regular_file(kRoot / c)) return c.lexically_normal().generic_string();
  return "";
}

// One line per include that `file` (project-relative) may not make, naming the file and line, the
// include and the two layers.
std::vector<std::string> violations(const LayerTable& t, const std::string& file, const std::string& text) {
  std::vector<std::string> out;
  const Layer* from = t.layer_of(file);
  if (!from) return {file + ": in no layer of " + kDoc + " (add its folder to a row of the table)"};
  const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (!std::regex_search(line, m, include_line)) continue;
    const std::string name = m[2], written = m[1] == "<" ? "<" + name + ">" : "\"" + name + "\"";
    const std::string target = resolve(file, name, m[1] == "\"");
    const std::string where = file + ":" + std::to_string(n) + ": #include " + written + ": ";
    if (target.empty()) {
      if (name.rfind("tapegrad/", 0) == 0) out.push_back(where + "no such header in include/");
      continue;  // a system or third-party header
    }
    const Layer* to = t.layer_of(target);
    if (!to) {
      out.push_back(where + target + " is in no layer (" + from->name + " may include only the layers below it)");
      continue;
    }
    if (to == from) continue;
    const bool is_public = target.rfind("include/tapegrad/", 0) == 0;
    if (to->rank > from->rank) {
      out.push_back(where + "layer " + from->name + " includes layer " + to->name + " (" + target +
                    "), which is above it");
    } else if (!from->may_include.count(to->name) && !(from->public_headers && is_public)) {
      std::string allowed;
      for (const std::string& a : from->may_include) allowed += (allowed.empty() ? "" : ", ") + a;
      if (from->public_headers) allowed += std::string(allowed.empty() ? "" : ", ") + "public headers";
      out.push_back(where + "layer " + from->name + " includes layer " + to->name + " (" + target + "); " +
                    kDoc + " lets " + from->name + " include " + (allowed.empty() ? "nothing" : allowed));
    }
  }
  return out;
}

std::vector<std::string> source_files() {
  std::vector<std::string> files;
  for (const std::string& top : kScanned) {
    if (!fs::is_directory(kRoot / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cc"))
        files.push_back(fs::relative(e.path(), kRoot).generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("the layer table in docs/architecture.md is complete and points down only", "[layers]") {
  const LayerTable& t = table();
  INFO(joined(t.errors));
  CHECK(t.errors.empty());
  REQUIRE(t.layers.size() >= 10);
  // Every listed file and folder exists.
  std::vector<std::string> missing;
  for (const Layer& l : t.layers)
    for (const std::string& p : l.paths)
      if (p.back() == '/' ? !fs::is_directory(kRoot / p) : !fs::is_regular_file(kRoot / p))
        missing.push_back(std::string(kDoc) + ": layer " + l.name + " lists " + p + ", which does not exist");
  INFO(joined(missing));
  CHECK(missing.empty());
  // The kernels are the bottom and include nothing of the library, public headers included.
  const Layer* kernels = t.find("kernels");
  REQUIRE(kernels != nullptr);
  CHECK(kernels->rank == 0);
  CHECK(kernels->may_include.empty());
  CHECK_FALSE(kernels->public_headers);
}

TEST_CASE("every include in the tree points the way the layer table allows", "[layers]") {
  const LayerTable& t = table();
  REQUIRE(t.errors.empty());
  std::vector<std::string> bad;
  const std::vector<std::string> files = source_files();
  for (const std::string& f : files) {
    const std::vector<std::string> v = violations(t, f, slurp(kRoot / f));
    bad.insert(bad.end(), v.begin(), v.end());
  }
  CHECK(files.size() > 100);
  INFO(bad.size() << " includes against the layer table:\n" << joined(bad));
  CHECK(bad.empty());
}

TEST_CASE("the include check refuses an include up, across, into no layer or of a missing header", "[layers]") {
  const LayerTable& t = table();
  REQUIRE(t.errors.empty());
  const auto check = [&](const std::string& file, const std::string& text) {
    const std::vector<std::string> v = violations(t, file, text);
    return v.empty() ? std::string() : v[0];
  };
  // Up: the tensor layer reaching into nn.
  const std::string up = check("src/tensor/tensor.cpp", "// x\n#include \"tapegrad/nn/module.hpp\"\n");
  CHECK_THAT(up, Catch::StartsWith("src/tensor/tensor.cpp:2: #include \"tapegrad/nn/module.hpp\": layer tensor "
                                   "includes layer nn"));
  // Down, but not a layer the row names: optim builds on nn's parameter lists, not on ops.
  CHECK_THAT(check("src/optim/optim.cpp", "#include \"tapegrad/ops.hpp\""),
             Catch::Contains("layer optim includes layer ops"));
  // The kernels include nothing public; tools and examples only public headers.
  CHECK_THAT(check("kernels/runtime.cpp", "#include \"tapegrad/error.hpp\""),
             Catch::Contains("layer kernels includes layer tensor") && Catch::Contains("above it"));
  CHECK_THAT(check("tools/cli/main.cpp", "#include \"src/internal.hpp\""),
             Catch::Contains("layer tools includes layer tensor"));
  CHECK_THAT(check("examples/char_lm.cpp", "#include <kernels/kernels.hpp>"),
             Catch::Contains("layer examples includes layer kernels"));
  // The Python module sees the public headers only (and its own bindings.hpp).
  CHECK_THAT(check("python/tensor.cpp", "#include \"src/internal.hpp\""),
             Catch::Contains("layer python includes layer tensor"));
  CHECK(check("python/tensor.cpp", "#include \"bindings.hpp\"\n#include <pybind11/numpy.h>\n"
                                   "#include \"tapegrad/ops.hpp\"\n")
            .empty());
  CHECK_THAT(check("src/nn/layers.cpp", "#include \"tests/catch_main.cpp\""), Catch::Contains("is in no layer"));
  CHECK_THAT(check("src/nn/layers.cpp", "#include <tapegrad/no_such.hpp>"), Catch::Contains("no such header"));
  CHECK_THAT(check("src/new_layer/x.cpp", ""), Catch::Contains("in no layer of docs/architecture.md"));
  // What the table allows passes: own layer, a named layer, public headers, system headers.
  CHECK(check("src/ops/matmul.cpp", "#include \"src/ops/op_util.hpp\"\n#include \"kernels/kernels.hpp\"\n"
                                    "#include <vector>\n#include \"tapegrad/autograd.hpp\"\n")
            .empty());
  CHECK(check("tools/cli/main.cpp", "#include \"cli.hpp\"\n#include \"tapegrad/train.hpp\"\n").empty());
  // The research harness is a layer of its own, above train.
  REQUIRE(t.find("experiments") != nullptr);
  CHECK(t.layer_of("experiments/harness.cpp") == t.find("experiments"));
}
