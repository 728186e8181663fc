#include "worker/exec/dump.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/hash/fingerprint.h"
#include "worker/data/npy.h"

namespace lockstep::worker {

namespace v1 = ::lockstep::v1;

absl::StatusOr<DumpSpec> ParseDumpSpec(absl::string_view text) {
  DumpSpec spec;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return spec;
  if (text == "all") {
    spec.kind = DumpSpec::Kind::kAll;
    return spec;
  }
  if (text == "first_divergent") {
    spec.kind = DumpSpec::Kind::kFirstDivergent;
    return spec;
  }
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() < 2 || parts.size() > 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dump: \"%s\" is not first_divergent, all or <layer>:<role>[:step]",
        text));
  }
  spec.kind = DumpSpec::Kind::kSelected;
  spec.layer = parts[0];
  if (!v1::TensorRole_Parse(absl::AsciiStrToUpper(parts[1]), &spec.role) ||
      spec.role == v1::TENSOR_ROLE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dump: role \"%s\" is not a tensor role (e.g. ACTIVATION, "
        "GRAD_WEIGHT, WEIGHT)",
        parts[1]));
  }
  if (parts.size() == 3) {
    int step = 0;
    if (!absl::SimpleAtoi(parts[2], &step) || step < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--dump: step \"%s\" is not an integer >= 0", parts[2]));
    }
    spec.step = step;
  }
  return spec;
}

bool DumpSelects(const DumpSpec& spec, int step,
                 const v1::ManifestEntry& entry) {
  switch (spec.kind) {
    case DumpSpec::Kind::kAll:
      return true;
    case DumpSpec::Kind::kSelected:
      return entry.layer() == spec.layer && entry.role() == spec.role &&
             (!spec.step.has_value() || *spec.step == step);
    default:
      return false;
  }
}

std::string DumpStem(int run, int step, const v1::ManifestEntry& entry) {
  std::string stem =
      absl::StrFormat("run%d_step%d_%04d_%s_%s", run, step, entry.index(),
                      entry.layer().empty() ? "input" : entry.layer(),
                      v1::TensorRole_Name(entry.role()));
  if (!entry.slot().empty()) absl::StrAppend(&stem, "_", entry.slot());
  return stem;
}

namespace {

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--dump_dir: cannot write \"%s\": %s", path, std::strerror(errno)));
  }
  const size_t n = std::fwrite(text.data(), 1, text.size(), f);
  const int close = std::fclose(f);
  if (n != text.size() || close != 0) {
    return absl::DataLossError(
        absl::StrFormat("--dump_dir: writing \"%s\" failed", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DumpTensor(const std::string& dir, int run,
                                       int step, const v1::ManifestEntry& entry,
                                       const kernels::Tensor& tensor,
                                       const v1::TensorFingerprint& fp) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--dump_dir: cannot create \"%s\": %s", dir, ec.message()));
  }
  const std::string stem =
      (std::filesystem::path(dir) / DumpStem(run, step, entry)).string();
  LS_RETURN_IF_ERROR(WriteNpy(stem + ".npy", tensor));
  std::string entry_json;
  std::string stats_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(entry, &entry_json, opts);
  (void)google::protobuf::util::MessageToJsonString(fp.stats(), &stats_json,
                                                    opts);
  const std::string json = absl::StrFormat(
      "{\"run\": %d, \"step\": %d, \"entry\": %s, \"fingerprint\": \"%s\", "
      "\"stats\": %s}\n",
      run, step, entry_json,
      hash::Fingerprint{fp.hash_hi(), fp.hash_lo()}.ToHex(), stats_json);
  LS_RETURN_IF_ERROR(WriteText(stem + ".json", json));
  return stem + ".npy";
}

TensorObserver MakeDumpObserver(DumpSpec spec, std::string dir, int run,
                                TensorObserver next) {
  return [spec = std::move(spec), dir = std::move(dir), run,
          next = std::move(next)](
             int step, const v1::ManifestEntry& entry,
             const kernels::Tensor& tensor,
             const v1::TensorFingerprint& fp) -> absl::Status {
    if (DumpSelects(spec, step, entry)) {
      LS_RETURN_IF_ERROR(
          DumpTensor(dir, run, step, entry, tensor, fp).status());
    }
    if (next) return next(step, entry, tensor, fp);
    return absl::OkStatus();
  };
}

}  // namespace lockstep::worker
