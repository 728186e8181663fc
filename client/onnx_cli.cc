#include "client/onnx_cli.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep::client {

bool IsOnnxPath(absl::string_view path) {
  return absl::EndsWithIgnoreCase(path, ".onnx");
}

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what,
                                          int64_t max_bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, ": not found"));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": is a directory"));
  }
  if (st.st_size > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s %s: %d bytes, over the limit of %d bytes", what,
                        path, static_cast<int64_t>(st.st_size), max_bytes));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " ", path, ": cannot be read"));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::Status WriteWholeFile(const std::string& path, absl::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(path + ": cannot be written");
  f.write(bytes.data(), bytes.size());
  f.close();
  if (!f) return absl::InternalError(path + ": write failed");
  return absl::OkStatus();
}

std::string StemOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  absl::string_view base =
      slash == absl::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return std::string(
      dot == absl::string_view::npos || dot == 0 ? base : base.substr(0, dot));
}

}  // namespace

absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             OnnxImportOptions options) {
  // torch.onnx.export names every graph "torch_jit": the file name says
  // more.
  if (options.model_name.empty()) options.model_name = StemOf(path);
  absl::StatusOr<std::string> bytes =
      ReadWholeFile(path, "ONNX model", options.max_file_bytes);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<ImportedModel> m = ImportOnnx(*bytes, options);
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

std::string ParamsPathFor(absl::string_view model_json_path) {
  absl::string_view p = model_json_path;
  if (absl::EndsWithIgnoreCase(p, ".json")) p.remove_suffix(5);
  return absl::StrCat(p, ".params");
}

std::string ModelToJson(const lockstep::v1::Model& model) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(model, &json, opts);
  return json;
}

absl::StatusOr<std::string> ReadParameterBlob(const std::string& path,
                                              absl::string_view digest) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(
      path,
      absl::StrCat("parameters (the model's parameters_digest is ", digest,
                   ")"),
      int64_t{1} << 31);
  if (!bytes.ok()) return bytes.status();
  const std::string got = ParametersDigest(*bytes);
  if (got != digest) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--params: %s hashes to %s but the model's parameters_digest is %s "
        "(re-run lockstep import, or pass the matching --params FILE)",
        path, got, digest));
  }
  return bytes;
}

int RunImport(const std::vector<std::string>& args,
              const std::string& output_path, const std::string& params_path,
              FILE* out, FILE* err) {
  if (args.size() != 1 || !IsOnnxPath(args[0])) {
    std::fprintf(err,
                 "lockstep: import: expected MODEL.onnx [-o MODEL.json] "
                 "[--params FILE] (see lockstep --help)\n");
    return kExitUsage;
  }
  std::string json_path = output_path;
  if (json_path.empty()) {
    json_path = args[0].substr(0, args[0].size() - 5) + ".json";
  }
  const std::string blob_path =
      params_path.empty() ? ParamsPathFor(json_path) : params_path;
  if (blob_path == json_path || json_path == args[0] || blob_path == args[0]) {
    std::fprintf(err,
                 "lockstep: import: -o, --params and the .onnx file must be "
                 "three different files\n");
    return kExitUsage;
  }
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(args[0]);
  if (!m.ok()) {
    std::fprintf(err, "lockstep: import: %s\n",
                 std::string(m.status().message()).c_str());
    return kExitCouldNotRun;
  }
  // The blob first: a model JSON never names a digest whose file is missing.
  absl::Status s = WriteWholeFile(blob_path, m->parameters_bytes);
  if (s.ok()) s = WriteWholeFile(json_path, ModelToJson(m->model));
  if (!s.ok()) {
    std::fprintf(err, "lockstep: import: %s\n",
                 std::string(s.message()).c_str());
    return kExitCouldNotRun;
  }
  std::fputs(FormatImportSummary(*m).c_str(), out);
  std::fprintf(out, "wrote %s and %s\n", json_path.c_str(), blob_path.c_str());
  return kExitOk;
}

}  // namespace lockstep::client
