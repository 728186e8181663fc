// ONNX import: a model exported with torch.onnx.export becomes a Lockstep
// model (lockstep.v1.Model) and its initial weights (lockstep.v1.
// ParameterSet). docs/bring-your-own-model.md documents the op mapping.
//
// The forward graph maps node for node onto Lockstep layers (Lockstep
// derives the backward pass); the importer appends the loss, SOFTMAX_XENT
// over the graph's single output (the logits). Shapes are inferred by the
// importer itself (ONNX value_info is not read). Subgraphs whose every input
// is known at import time (shape arithmetic, masks sliced from a buffer) are
// folded into constants. Float initializers on a differentiable path to the
// output are the model's parameters; their values land in the ParameterSet.
//
// Errors are INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a limit) and name
// the ONNX node, the field and the limit. Every node whose op is not
// supported is listed in one error. Thread-safe (pure).
#ifndef LOCKSTEP_CLIENT_ONNX_IMPORT_H_
#define LOCKSTEP_CLIENT_ONNX_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/model.pb.h"
#include "lockstep/v1/parameters.pb.h"

namespace lockstep::client {

struct OnnxImportOptions {
  int64_t max_file_bytes = int64_t{512} << 20;         // the .onnx file
  int64_t max_nodes = 20000;                           // graph nodes
  int64_t max_initializer_bytes = int64_t{512} << 20;  // all initializers
  // Model.name; empty: the ONNX graph's name, else "onnx_model".
  std::string model_name;
};

struct ImportedModel {
  lockstep::v1::Model model;  // parameters_digest is set
  lockstep::v1::ParameterSet parameters;
  // The exact bytes whose SHA-256 is model.parameters_digest.
  std::string parameters_bytes;
  // Things the user should know (a dead node skipped, a Dropout in
  // inference mode, ...); one line each.
  std::vector<std::string> warnings;
};

absl::StatusOr<ImportedModel> ImportOnnx(absl::string_view onnx_bytes,
                                         const OnnxImportOptions& options);

// Deterministic serialization of `parameters` (the blob the coordinator
// stores) and its content digest, "sha256:" + 64 lowercase hex digits.
std::string SerializeParameterSet(const lockstep::v1::ParameterSet& parameters);
std::string ParametersDigest(absl::string_view parameters_bytes);

// A one-screen summary: layers per op, parameter tensors and elements,
// warnings.
std::string FormatImportSummary(const ImportedModel& imported);

}  // namespace lockstep::client

#endif  // LOCKSTEP_CLIENT_ONNX_IMPORT_H_
