// The driver of every *_replay_test: runs each file named on the command
// line (or found under a directory named there) through the harness's
// LLVMFuzzerTestOneInput once, in sorted order. A harness invariant that
// fails aborts the test, naming the input on stderr first. Fails when no
// input is found at all, so an empty corpus cannot pass unnoticed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

void Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (fs::recursive_directory_iterator
             it(path, fs::directory_options::follow_directory_symlink, ec),
         end;
         !ec && it != end; it.increment(ec)) {
      if (fs::is_regular_file(it->path(), ec)) files->push_back(it->path());
    }
  } else if (fs::is_regular_file(path, ec)) {
    files->push_back(path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input files found in the arguments\n");
    return 1;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 1;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", file.c_str(),
                 bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  std::printf("replay: %zu inputs, no invariant failed\n", files.size());
  return 0;
}
