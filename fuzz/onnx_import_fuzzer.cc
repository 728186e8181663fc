// ONNX models (client/onnx_import.h ImportOnnx), as `lockstep import`,
// `submit` and `check` read them.
//
// Invariants for an accepted model:
//   - parameters_digest is "sha256:" + the SHA-256 of parameters_bytes,
//     which parse back to the returned ParameterSet;
//   - every parameter tensor holds 4 x prod(shape) bytes of finite floats;
//   - layer names are unique and match [A-Za-z0-9_.-]{1,64}; every input
//     names an earlier layer; the first layer reads the model input (no
//     inputs) and no other layer does; the last layer is the SOFTMAX_XENT
//     loss; names and origins are UTF-8 (origins at most 256 bytes).
// Every refusal is INVALID_ARGUMENT or RESOURCE_EXHAUSTED starting "onnx: ".
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "client/onnx_import.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "fuzz/fuzz_check.h"

using ::lockstep::client::ImportedModel;
using ::lockstep::client::ImportOnnx;
using ::lockstep::client::OnnxImportOptions;

namespace {

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  OnnxImportOptions options;
  options.max_nodes = 2000;
  options.max_initializer_bytes = 1 << 20;
  absl::StatusOr<ImportedModel> m = ImportOnnx(bytes, options);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument ||
                   m.status().code() == absl::StatusCode::kResourceExhausted,
               m.status().ToString());
    FUZZ_CHECK(absl::StartsWith(m.status().message(), "onnx: "),
               m.status().ToString());
    return 0;
  }
  FUZZ_CHECK(m->model.parameters_digest() ==
                 "sha256:" + lockstep::Sha256Hex(m->parameters_bytes),
             "parameters_digest is not the SHA-256 of the parameter bytes");
  lockstep::v1::ParameterSet back;
  FUZZ_CHECK(back.ParseFromString(m->parameters_bytes) &&
                 back.SerializeAsString() == m->parameters.SerializeAsString(),
             "parameter bytes do not parse back to the ParameterSet");
  for (const auto& t : m->parameters.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape()) {
      FUZZ_CHECK(d >= 0, "negative parameter dimension");
      n *= d;
    }
    FUZZ_CHECK(static_cast<int64_t>(t.data().size()) == 4 * n,
               "parameter bytes are not 4 x prod(shape): " + t.layer());
    for (int64_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, t.data().data() + 4 * i, 4);
      FUZZ_CHECK(std::isfinite(f), "a parameter value is not finite");
    }
  }
  FUZZ_CHECK(lockstep::IsUtf8(m->model.name()), "model name is not UTF-8");
  const auto& layers = m->model.layers();
  FUZZ_CHECK(layers.size() >= 2, "fewer than two layers");
  FUZZ_CHECK(layers[0].inputs().empty(), "the first layer names inputs");
  FUZZ_CHECK(layers[layers.size() - 1].op() == lockstep::v1::SOFTMAX_XENT,
             "the last layer is not the loss");
  std::set<std::string> seen;
  for (const auto& l : layers) {
    FUZZ_CHECK(ValidName(l.name()), "bad layer name: " + l.name());
    for (const std::string& in : l.inputs()) {
      FUZZ_CHECK(seen.count(in), "input " + in + " of " + l.name() +
                                     " is not an earlier layer");
    }
    FUZZ_CHECK(seen.insert(l.name()).second, "duplicate name " + l.name());
    FUZZ_CHECK(lockstep::IsUtf8(l.origin()) && l.origin().size() <= 256,
               "origin is not UTF-8 of at most 256 bytes");
  }
  return 0;
}
