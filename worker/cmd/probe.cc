#include "worker/cmd/probe.h"

#include <cstdio>
#include <string>

#include "google/protobuf/util/json_util.h"

namespace lockstep::worker::cmd {

int ProbeMain(const ProbeCommandOptions& options, HardwareProbe& probe,
              std::FILE* out, std::FILE* err) {
  auto profile = probe.Probe();
  if (!profile.ok()) {
    std::fprintf(err, "lockstep-worker: probe failed: %s\n",
                 profile.status().ToString().c_str());
    return 1;
  }
  if (options.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(*profile, &json, opts);
    std::fprintf(out, "%s", json.c_str());
    return 0;
  }
  const auto& p = *profile;
  std::fprintf(out, "host:            %s\n", p.hostname().c_str());
  std::fprintf(out, "cpu:             %s (%s, %s), %d logical cores\n",
               p.cpu().model().c_str(), p.cpu().vendor().c_str(),
               p.cpu().arch().c_str(), p.cpu().cores());
  std::string features;
  for (const auto& f : p.cpu().features()) features += f + " ";
  std::fprintf(out, "isa:             %s\n", features.c_str());
  std::fprintf(out, "os:              %s, kernel %s\n",
               p.software().distro().c_str(), p.software().kernel().c_str());
  std::fprintf(out, "built with:      %s, CUDA %s\n",
               p.software().compiler().c_str(),
               p.software().built_with_cuda() ? "yes" : "no");
  if (p.software().built_with_cuda()) {
    const auto& sw = p.software();
    std::string libs = sw.vendor_libraries_error();
    if (libs.empty()) {
      libs = "loaded";
      if (!sw.cublas_version().empty()) {
        libs += " (cuBLAS " + sw.cublas_version() + ", cuDNN " +
                sw.cudnn_version() + ")";
      }
    }
    std::fprintf(out, "vendor libs:     %s\n", libs.c_str());
  }
  if (p.gpus_size() == 0) {
    std::fprintf(out, "gpus:            none (%s)\n", p.gpu_error().c_str());
  }
  for (const auto& g : p.gpus()) {
    std::fprintf(out, "gpu %d:           %s, sm_%d%d, %d SMs, %s\n",
                 g.ordinal(), g.name().c_str(), g.compute_capability_major(),
                 g.compute_capability_minor(), g.sm_count(), g.uuid().c_str());
  }
  std::fprintf(out, "hardware class:  %s\n", p.hardware_class().c_str());
  std::fprintf(out, "class digest:    %s\n", p.hardware_class_digest().c_str());
  return 0;
}

}  // namespace lockstep::worker::cmd
