// tapegrad used from outside its tree, the two ways the README shows: installed (meson install into a
// temporary DESTDIR, then a program built with `pkg-config --cflags --libs tapegrad` alone) and as a
// Meson subproject (a project of its own with tapegrad under subprojects/ and dependency('tapegrad')).
// Both build and run tests/outside/consumer/main.cpp. They run the compiler, meson and ninja as
// processes, with the compiler this build uses (ccache included) and its sanitizers, if any.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/cli/process.hpp"

namespace fs = std::filesystem;

namespace {

using Result = tapegrad::test::Run;  // exit code; stdout and stderr together

// Runs a shell command; its exit code and output.
Result shell(const std::string& command) { return tapegrad::test::run_command(command); }

std::string quoted(const fs::path& p) {
  std::string q = "'";
  q += p.string();
  q += '\'';
  return q;
}

// An empty directory in the temporary directory, unique to this process.
fs::path fresh_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("tapegrad-outside-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

const fs::path kSource = TAPEGRAD_SOURCE_DIR;
const fs::path kConsumer = kSource / "tests" / "outside" / "consumer";
const std::string kSanitize = TAPEGRAD_SANITIZE;  // b_sanitize of this build ("none" if none)

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The consumer ran and every one of its checks passed.
void require_consumer_ran(const Result& run) {
  INFO(run.out);
  REQUIRE(run.code == 0);
  CHECK(run.out.find("consumer ok: tapegrad 0.1.0") != std::string::npos);
}

}  // namespace

TEST_CASE("a program builds against the installed library with pkg-config alone", "[outside][install]") {
  const fs::path root = fresh_dir("install"), dest = root / "dest";
  const Result install =
      shell("meson install -C " + quoted(TAPEGRAD_BUILD_DIR) + " --no-rebuild --destdir " + quoted(dest));
  INFO(install.out);
  REQUIRE(install.code == 0);

  fs::path pc;
  for (const auto& e : fs::recursive_directory_iterator(dest))
    if (e.path().filename() == "tapegrad.pc") pc = e.path();
  REQUIRE_FALSE(pc.empty());
  // Only the installed tapegrad.pc is visible; -I and -L point into the DESTDIR.
  const std::string pkg_config = "PKG_CONFIG_LIBDIR=" + quoted(pc.parent_path()) +
                                 " PKG_CONFIG_SYSROOT_DIR=" + quoted(dest) + " pkg-config";
  const Result flags = shell(pkg_config + " --cflags --libs tapegrad");
  INFO(flags.out);
  REQUIRE(flags.code == 0);
  std::string out = flags.out;
  out.erase(out.find_last_not_of(" \n") + 1);
  CHECK(out.find(kSource.string()) == std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("-I(\\S+)")));
  const fs::path include_dir = m[1].str();
  CHECK(include_dir.string().rfind(dest.string(), 0) == 0);

  // Every installed header includes only standard headers and other installed tapegrad headers,
  // and all of them compile together with nothing but the installed include directory.
  std::string all_headers;
  int headers = 0;
  const std::regex include_line("^\\s*#\\s*include\\s*([<\"])([^>\"]+)[>\"]");
  for (const auto& e : fs::recursive_directory_iterator(include_dir / "tapegrad")) {
    if (e.path().extension() != ".hpp") continue;
    ++headers;
    const std::string rel = e.path().lexically_relative(include_dir).string();
    all_headers += "#include <" + rel + ">\n";
    std::istringstream text(slurp(e.path()));
    for (std::string line; std::getline(text, line);) {
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string target = m[2].str();
      INFO(rel << ": " << line);
      if (m[1].str() == "\"")
        CHECK((target.rfind("tapegrad/", 0) == 0 && fs::exists(include_dir / target)));
      else
        CHECK(target.find_first_of("./") == std::string::npos);  // <vector>, not <xsimd/xsimd.hpp> or <omp.h>
    }
  }
  CHECK(headers >= 20);
  std::ofstream(root / "all_headers.cpp") << all_headers;

  const std::string cxx =
      std::string(TAPEGRAD_CXX) + " -std=c++20" + (kSanitize == "none" ? "" : " -fsanitize=" + kSanitize);
  const Result syntax = shell(cxx + " -fsyntax-only " + quoted(root / "all_headers.cpp") + " " + out);
  CHECK(syntax.code == 0);
  INFO(syntax.out);

  const fs::path exe = root / "consumer";
  const Result build = shell(cxx + " " + quoted(kConsumer / "main.cpp") + " -o " + quoted(exe) + " " + out);
  INFO(build.out);
  REQUIRE(build.code == 0);
  // A shared libtapegrad is found in the DESTDIR (the static one is inside the program already).
  require_consumer_ran(
      shell("LD_LIBRARY_PATH=" + quoted(pc.parent_path().parent_path()) + " " + quoted(exe)));
  fs::remove_all(root);
}

TEST_CASE("a Meson project uses tapegrad as a subproject", "[outside][subproject]") {
  const fs::path root = fresh_dir("subproject"), src = root / "src", build = root / "build";
  fs::create_directories(src / "subprojects");
  fs::copy(kConsumer / "meson.build", src / "meson.build");
  fs::copy(kConsumer / "main.cpp", src / "main.cpp");
  fs::create_directory_symlink(kSource, src / "subprojects" / "tapegrad");

  // --force-fallback-for: the subproject even when a tapegrad.pc is installed on this machine. The
  // consumer keeps Meson's default debug build, as a new project would; the compiler of this build
  // brings its ccache, if any.
  std::string setup = "CXX=" + quoted(TAPEGRAD_CXX) + " meson setup " + quoted(build) + " " + quoted(src) +
                      " --force-fallback-for=tapegrad -Dtapegrad:tests=false -Dtapegrad:bench=false";
  if (kSanitize != "none") setup += " -Db_sanitize=" + kSanitize + " -Db_lundef=false";
  const Result configured = shell(setup);
  INFO(configured.out);
  REQUIRE(configured.code == 0);
  CHECK(std::regex_search(configured.out,
                          std::regex("Dependency tapegrad found: YES 0\\.1\\.0 \\(overridden\\)")));

  const Result built = shell("ninja -C " + quoted(build));
  INFO(built.out);
  REQUIRE(built.code == 0);
  // As a subproject tapegrad builds its library only: no command line, tests or benchmarks.
  CHECK_FALSE(fs::exists(build / "subprojects" / "tapegrad" / "tools"));
  CHECK_FALSE(fs::exists(build / "subprojects" / "tapegrad" / "tests"));
  CHECK_FALSE(fs::exists(build / "subprojects" / "tapegrad" / "bench"));

  require_consumer_ran(shell(quoted(build / "consumer")));
  fs::remove_all(root);
}
