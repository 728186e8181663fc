// The real lockstep-worker binary on a node without cuBLAS / cuDNN: it does
// not link them (no DT_NEEDED entry), and with LOCKSTEP_VENDOR_LIBRARY_DIR
// pointing at an empty place it starts, `probe` names the missing libraries
// in one line, and the selftest and CPU runs work.
#include <elf.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Worker() { return testing::RunfilePath("worker/lockstep-worker"); }

// The DT_NEEDED entries of a 64-bit ELF file.
std::vector<std::string> NeededLibraries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string elf = ss.str();
  std::vector<std::string> out;
  if (elf.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  if (std::string(reinterpret_cast<const char*>(eh->e_ident), 4) != ELFMAG ||
      eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shoff + eh->e_shnum * sizeof(Elf64_Shdr) > elf.size()) {
    return out;
  }
  const auto* sh =
      reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNAMIC || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    const auto* dyn =
        reinterpret_cast<const Elf64_Dyn*>(elf.data() + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Dyn); ++k) {
      if (dyn[k].d_tag == DT_NEEDED) {
        out.emplace_back(elf.data() + strtab.sh_offset + dyn[k].d_un.d_val);
      }
    }
  }
  return out;
}

// Runs the worker with the vendor libraries looked up in a directory that
// does not exist.
testing::CommandResult RunWithoutVendorLibs(std::vector<std::string> args) {
  std::vector<std::string> argv = {
      "/usr/bin/env", "LOCKSTEP_VENDOR_LIBRARY_DIR=/nonexistent-vendor-dir",
      Worker()};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<testing::CommandResult> r =
      testing::RunCommand(argv, absl::Seconds(120));
  EXPECT_THAT(r, IsOk());
  return r.ok() ? *r : testing::CommandResult{};
}

TEST(AnyNodeTest, BinaryDoesNotLinkTheVendorLibraries) {
  const std::vector<std::string> needed = NeededLibraries(Worker());
  ASSERT_FALSE(needed.empty()) << "no DT_NEEDED entries read from " << Worker();
  for (const std::string& lib : needed) {
    EXPECT_FALSE(absl::StartsWith(lib, "libcublas") ||
                 absl::StartsWith(lib, "libcudnn"))
        << lib;
  }
}

TEST(AnyNodeTest, ProbeNamesTheMissingLibrariesInOneLine) {
  const testing::CommandResult r = RunWithoutVendorLibs({"probe"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (!absl::StrContains(r.out, "built with:      gcc") ||
      absl::StrContains(r.out, "CUDA no")) {
    GTEST_SKIP() << "built without CUDA:\n" << r.out;
  }
  std::string line;
  for (absl::string_view l : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(l, "vendor libs:")) line = std::string(l);
  }
  EXPECT_THAT(line, HasSubstr("cuBLAS not loaded: /nonexistent-vendor-dir/"
                              "libcublas.so."));
  EXPECT_THAT(line, HasSubstr("; cuDNN not loaded: /nonexistent-vendor-dir/"
                              "libcudnn.so."));
  EXPECT_THAT(line, HasSubstr("cannot open shared object file"));
  // With the libraries where the build found them, they load.
  absl::StatusOr<testing::CommandResult> normal =
      testing::RunCommand({Worker(), "probe"}, absl::Seconds(120));
  ASSERT_THAT(normal, IsOk());
  EXPECT_THAT(normal->out, HasSubstr("vendor libs:     loaded"));
}

TEST(AnyNodeTest, SelftestAndCpuRunsWork) {
  const testing::CommandResult st = RunWithoutVendorLibs({"selftest"});
  EXPECT_EQ(st.exit_code, 0) << st.out << st.err;
  EXPECT_THAT(st.out, HasSubstr("\nselftest: PASS: "));

  const std::string config = testing::TempDir() + "/any_node_config.json";
  std::ofstream(config) << R"({"seed": 3, "batch_size": 4, "steps": 3,
    "optimizer": {"kind": "SGD", "learning_rate": 0.1},
    "determinism": "DETERMINISTIC", "backend": "ANY",
    "capture": {"kind": "EVERY_STEP"}, "dataset": {"synthetic": {}}})";
  const testing::CommandResult run = RunWithoutVendorLibs(
      {"run", "--model=" + testing::RunfilePath("examples/mlp/model.json"),
       "--config=" + config, "--runs=2"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out + run.err, Not(HasSubstr("cublas")));
}

}  // namespace
}  // namespace lockstep::worker
