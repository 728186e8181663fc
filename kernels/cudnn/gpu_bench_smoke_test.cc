// Runs //kernels/cudnn:gpu_bench (path in argv[1]): without a usable device
// it must print exactly "no GPU: <CudaDeviceStatus() message>" and exit 0;
// with one, it must exit 0 and print both reports' headers and rows.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_runtime.h"

namespace lockstep::kernels {
namespace {

std::string* bench_path = nullptr;

struct BenchRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

BenchRun RunBench(const std::string& args) {
  BenchRun run;
  const std::string command = *bench_path + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

TEST(GpuBenchSmokeTest, PrintsNoGpuOrBothReports) {
  const BenchRun run = RunBench("--reps=1");
  const absl::Status device = cuda::CudaDeviceStatus();
  if (!device.ok()) {
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(run.output, "no GPU: " + std::string(device.message()) + "\n");
    return;
  }
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* expected :
       {"device: ", "\ndevice_hash ", "\ndevice_hash_stats ", "\nd2d_copy ",
        "\ncost of determinism on ", "\ncase ", "\ngemm 1024x1024x1024 ",
        "\ngemm 2048x2048x2048 ", "\nconv2d.forward lenet ",
        "\nconv2d.grad_input lenet ", "\nconv2d.grad_weight lenet ",
        "\nconv2d.forward resnet ", "\nconv2d.grad_input resnet ",
        "\nconv2d.grad_weight resnet ",
        "\ntiled canonical GEMM vs cuBLAS SGEMM ", "\n  gemm 1024x1024x1024 ",
        "\n  gemm 2048x2048x2048 ", "\ncuDNN algorithms chosen:\n"}) {
    EXPECT_NE(run.output.find(expected), std::string::npos)
        << "missing \"" << expected << "\" in:\n"
        << run.output;
  }
}

TEST(GpuBenchSmokeTest, RejectsBadFlags) {
  for (const char* args : {"--reps=0", "--reps=2x", "--bogus"}) {
    const BenchRun run = RunBench(args);
    EXPECT_EQ(run.exit_code, 1) << args << ": " << run.output;
    EXPECT_NE(run.output.find("usage: gpu_bench"), std::string::npos)
        << run.output;
  }
}

}  // namespace
}  // namespace lockstep::kernels

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_bench_smoke_test <gpu_bench binary>\n");
    return 2;
  }
  lockstep::kernels::bench_path = new std::string(argv[1]);
  return RUN_ALL_TESTS();
}
