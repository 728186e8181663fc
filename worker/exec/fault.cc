#include "worker/exec/fault.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/manifest.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;

constexpr char kPrefix[] = "--inject_fault: ";

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(kPrefix, message));
}

int BitsOf(v1::DType dtype) { return dtype == v1::UINT8 ? 8 : 32; }

int64_t NumElements(const v1::ManifestEntry& e) {
  int64_t n = 1;
  for (int64_t d : e.shape()) n *= d;
  return n;
}

}  // namespace

std::string FaultSpec::ToString() const {
  std::string s = absl::StrFormat("step=%d,layer=%s,role=%s,bit=%d", step,
                                  layer, v1::TensorRole_Name(role), bit);
  if (element != 0) absl::StrAppend(&s, ",element=", element);
  if (slot.has_value()) absl::StrAppend(&s, ",slot=", *slot);
  if (index.has_value()) absl::StrAppend(&s, ",index=", *index);
  return s;
}

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text) {
  FaultSpec f;
  std::set<std::string> seen;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return Invalid(
        "empty; expected step=S,layer=L,role=R,bit=B[,element=E][,slot=X]");
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return Invalid(absl::StrFormat("\"%s\" is not key=value", part));
    }
    const std::string key(absl::StripAsciiWhitespace(part.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(part.substr(eq + 1)));
    if (!seen.insert(key).second) {
      return Invalid(absl::StrFormat("%s: given twice", key));
    }
    if (key == "step") {
      if (!absl::SimpleAtoi(value, &f.step) || f.step < 0) {
        return Invalid(
            absl::StrFormat("step: \"%s\" is not an integer >= 0", value));
      }
    } else if (key == "layer") {
      f.layer = value;
    } else if (key == "role") {
      v1::TensorRole role;
      if (!v1::TensorRole_Parse(absl::AsciiStrToUpper(value), &role) ||
          role == v1::TENSOR_ROLE_UNSPECIFIED) {
        std::vector<std::string> names;
        for (int r = v1::INPUT; r <= v1::OPTIMIZER_STATE; ++r) {
          names.push_back(v1::TensorRole_Name(static_cast<v1::TensorRole>(r)));
        }
        return Invalid(absl::StrFormat("role: \"%s\" is not one of %s", value,
                                       absl::StrJoin(names, ", ")));
      }
      f.role = role;
    } else if (key == "bit") {
      if (!absl::SimpleAtoi(value, &f.bit) || f.bit < 0 || f.bit > 31) {
        return Invalid(
            absl::StrFormat("bit: \"%s\" is outside [0, 31]", value));
      }
    } else if (key == "element") {
      if (!absl::SimpleAtoi(value, &f.element) || f.element < 0) {
        return Invalid(
            absl::StrFormat("element: \"%s\" is not an integer >= 0", value));
      }
    } else if (key == "slot") {
      f.slot = value;
    } else if (key == "index") {
      int index = 0;
      if (!absl::SimpleAtoi(value, &index) || index < 0) {
        return Invalid(
            absl::StrFormat("index: \"%s\" is not an integer >= 0", value));
      }
      f.index = index;
    } else {
      return Invalid(absl::StrFormat(
          "unknown key \"%s\" (known: step, layer, role, bit, element, slot, "
          "index)",
          key));
    }
  }
  for (const char* required : {"step", "role", "bit"}) {
    if (seen.count(required) == 0) {
      return Invalid(absl::StrFormat("%s: missing (required)", required));
    }
  }
  if (seen.count("layer") == 0 && f.role != v1::INPUT && f.role != v1::LABEL) {
    return Invalid(absl::StrFormat("layer: missing (required for role %s)",
                                   v1::TensorRole_Name(f.role)));
  }
  return f;
}

absl::StatusOr<int> ResolveFault(
    const FaultSpec& fault, const std::vector<v1::ManifestEntry>& step_tensors,
    int steps) {
  if (fault.step < 0 || fault.step >= steps) {
    return Invalid(absl::StrFormat(
        "step: %d is outside the job's steps [0, %d]", fault.step, steps - 1));
  }
  int found = -1;
  std::vector<std::string> layer_entries;
  for (const v1::ManifestEntry& e : step_tensors) {
    if (e.layer() != fault.layer) continue;
    layer_entries.push_back(model::DescribeEntry(e));
    if (found >= 0) continue;
    if (e.role() != fault.role) continue;
    if (fault.slot.has_value() && e.slot() != *fault.slot) continue;
    if (fault.index.has_value() && e.index() != *fault.index) continue;
    found = e.index();
  }
  if (found < 0) {
    std::string what = absl::StrFormat("layer \"%s\" role %s", fault.layer,
                                       v1::TensorRole_Name(fault.role));
    if (fault.slot.has_value()) absl::StrAppend(&what, " slot ", *fault.slot);
    if (fault.index.has_value()) {
      absl::StrAppend(&what, " index ", *fault.index);
    }
    if (layer_entries.empty()) {
      return Invalid(absl::StrFormat(
          "%s matches no tensor of the step: the model has no layer \"%s\"",
          what, fault.layer));
    }
    return Invalid(absl::StrFormat(
        "%s matches no tensor of the step; that layer's tensors are: %s", what,
        absl::StrJoin(layer_entries, "; ")));
  }
  const v1::ManifestEntry& e = step_tensors[found];
  const int64_t n = NumElements(e);
  if (fault.element >= n) {
    return Invalid(absl::StrFormat("element: %d is outside [0, %d] of %s",
                                   fault.element, n - 1,
                                   model::DescribeEntry(e)));
  }
  if (fault.bit >= BitsOf(e.dtype())) {
    return Invalid(absl::StrFormat("bit: %d is outside [0, %d] of %s",
                                   fault.bit, BitsOf(e.dtype()) - 1,
                                   model::DescribeEntry(e)));
  }
  return found;
}

absl::Status FlipBit(kernels::Tensor& t, int64_t element, int bit) {
  const int64_t size = kernels::DTypeSize(t.dtype());
  if (element < 0 || element >= t.numel()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fault: element %d is outside [0, %d) of %s", element,
                        t.numel(), t.DebugString()));
  }
  if (bit < 0 || bit >= size * 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fault: bit %d is outside [0, %d) of %s", bit, size * 8,
                        t.DebugString()));
  }
  // Little-endian element bytes: bit b lives in byte b / 8.
  unsigned char* p =
      static_cast<unsigned char*>(t.raw_data()) + element * size + bit / 8;
  *p = static_cast<unsigned char>(*p ^ (1u << (bit % 8)));
  return absl::OkStatus();
}

}  // namespace lockstep::worker
