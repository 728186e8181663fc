// `lockstep import` and the ONNX path of submit / check: reading a .onnx
// file, writing the model JSON and the ParameterSet file.
#ifndef LOCKSTEP_CLIENT_ONNX_CLI_H_
#define LOCKSTEP_CLIENT_ONNX_CLI_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/onnx_import.h"

namespace lockstep::client {

// True for a path ending in ".onnx" (any case).
bool IsOnnxPath(absl::string_view path);

// Reads `path` (at most options.max_file_bytes, checked before reading)
// and imports it; the model is named after the file when the graph has no
// name. Errors name the path.
absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             OnnxImportOptions options = {});

// The ParameterSet file that belongs to a model JSON file: ".json" replaced
// by ".params" (appended when the name does not end in ".json").
std::string ParamsPathFor(absl::string_view model_json_path);

// The model as the project's spec JSON (model/spec_io.h reads it back).
std::string ModelToJson(const lockstep::v1::Model& model);

// Reads the ParameterSet file of a model whose parameters_digest is set and
// checks that its SHA-256 is that digest. Errors name the file and the
// digest.
absl::StatusOr<std::string> ReadParameterBlob(const std::string& path,
                                              absl::string_view digest);

// `lockstep import MODEL.onnx [-o MODEL.json] [--params FILE]`: writes the
// model JSON (default: MODEL.json next to the .onnx file) and the
// ParameterSet (default: ParamsPathFor(the JSON path)) and prints a
// summary to `out`. Returns 0, 3 (import or write failed) or 64 (usage).
int RunImport(const std::vector<std::string>& args,
              const std::string& output_path, const std::string& params_path,
              FILE* out, FILE* err);

}  // namespace lockstep::client

#endif  // LOCKSTEP_CLIENT_ONNX_CLI_H_
