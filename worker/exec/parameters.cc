#include "worker/exec/parameters.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status ValidateParameterSet(const model::ModelPlan& plan,
                                  const v1::ParameterSet& set) {
  std::set<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < set.tensors_size(); ++i) {
    const v1::ParameterTensor& t = set.tensors(i);
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    const std::string what = absl::StrCat(
        "parameters.tensors[", i, "] (layer \"", t.layer(), "\", param \"",
        t.param(), "\", shape ", ShapeText(shape), ")");
    const model::LayerPlan* layer = nullptr;
    for (const model::LayerPlan& lp : plan.layers) {
      if (lp.name == t.layer()) layer = &lp;
    }
    if (layer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the model has no layer \"", t.layer(), "\""));
    }
    std::vector<int64_t> planned;
    bool found = false;
    std::vector<std::string> names;
    for (const model::ParamPlan& pp : layer->params) {
      names.push_back(pp.name);
      if (pp.name == t.param()) {
        planned = pp.shape;
        found = true;
      }
    }
    if (layer->op == v1::BATCH_NORM) {
      names.push_back(kRunningStatsParam);
      if (t.param() == kRunningStatsParam) {
        planned = {2, layer->output_shape[1]};
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": layer \"", t.layer(), "\" has no param \"", t.param(),
          "\" (it has: ", names.empty() ? "none" : absl::StrJoin(names, ", "),
          ")"));
    }
    if (!seen.emplace(t.layer(), t.param()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": listed twice"));
    }
    if (shape != planned) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the planned shape is ", ShapeText(planned)));
    }
    int64_t numel = 1;
    for (int64_t d : planned) numel *= d;
    if (static_cast<int64_t>(t.data().size()) != 4 * numel) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data has ", t.data().size(),
                       " bytes; float32 of that shape needs ", 4 * numel));
    }
    for (int64_t k = 0; k < numel; ++k) {
      float v;
      std::memcpy(&v, t.data().data() + 4 * k, 4);
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": element ", k, " is not finite (", v, ")"));
      }
    }
  }
  return absl::OkStatus();
}

const v1::ParameterTensor* FindParameterTensor(const v1::ParameterSet* set,
                                               const std::string& layer,
                                               const std::string& param) {
  if (set == nullptr) return nullptr;
  for (const v1::ParameterTensor& t : set->tensors()) {
    if (t.layer() == layer && t.param() == param) return &t;
  }
  return nullptr;
}

absl::Status CopyParameterTensor(const v1::ParameterTensor& t,
                                 kernels::Tensor& out) {
  if (out.dtype() != kernels::DType::kFloat32 ||
      static_cast<int64_t>(t.data().size()) != out.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters: layer \"", t.layer(), "\" param \"", t.param(), "\": ",
        t.data().size(), " bytes do not fit a tensor of ", out.bytes()));
  }
  // Little-endian float32 on the wire and in memory (x86-64, aarch64).
  if (out.bytes() > 0) {
    std::memcpy(out.data<float>(), t.data().data(), t.data().size());
  }
  return absl::OkStatus();
}

}  // namespace lockstep::worker
