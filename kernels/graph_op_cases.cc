#include "kernels/graph_op_cases.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/graph_ops.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

class Gen {
 public:
  Gen(InputFamily family, uint32_t seed) : family_(family), rng_(seed) {}

  Tensor Floats(std::vector<int64_t> shape) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, std::move(shape));
    float* p = t.data<float>();
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ints(-8, 8);
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = family_ == InputFamily::kSmallInts ? static_cast<float>(ints(rng_))
                                                : uniform(rng_);
      if (family_ == InputFamily::kRandom && i % 97 == 5) p[i] = -0.0f;
    }
    return t;
  }
  // n indices in [0, v), each drawn with weight favouring low ids (so some
  // rows get long segments and some none).
  Tensor Indices(int64_t n, int32_t v) {
    Tensor t = *Tensor::Zeros(DType::kInt32, {n});
    std::uniform_int_distribution<int32_t> draw(0, v - 1);
    int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = draw(rng_) / (i % 3 == 0 ? 1 : 2);
    return t;
  }

 private:
  InputFamily family_;
  std::mt19937 rng_;
};

Tensor Zeros(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}

Tensor Ints(std::vector<int32_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return *Tensor::FromValues<int32_t>({n}, values);
}

}  // namespace

std::vector<OpCase> GraphDataOpCases(InputFamily family, uint32_t seed) {
  Gen g(family, seed ^ 0x6a09e667u);
  std::vector<OpCase> c;
  c.push_back(
      {"constant 3x5", op::kConstant, {g.Floats({3, 5})}, {Zeros({15})}, {}});
  c.push_back({"parameter.forward 4x6",
               op::kParameterForward,
               {g.Floats({4, 6})},
               {Zeros({4, 6})},
               {}});
  c.push_back({"parameter.grad 4x6",
               op::kParameterGrad,
               {g.Floats({4, 6})},
               {Zeros({4, 6})},
               {}});
  c.push_back({"gather.forward a=2 v=7 p=5 b=3",
               op::kGatherForward,
               {g.Floats({2, 7, 3}), Ints({6, 0, 3, 3, 1})},
               {Zeros({2, 5, 3})},
               {}});
  c.push_back({"gather.forward token table v=11 p=40 d=8",
               op::kGatherForward,
               {g.Floats({1, 11, 8}), g.Indices(40, 11)},
               {Zeros({1, 40, 8})},
               {}});
  c.push_back({"gather.grad a=2 v=9 p=600 b=3",
               op::kGatherGrad,
               {g.Indices(600, 9), g.Floats({2, 600, 3})},
               {Zeros({2, 9, 3})},
               {}});
  c.push_back({"slice.forward a=2 v=7 p=3 b=3",
               op::kSliceForward,
               {g.Floats({2, 7, 3}), Ints({1, 3, 5})},
               {Zeros({2, 3, 3})},
               {}});
  c.push_back({"slice.grad a=2 v=7 p=3 b=3",
               op::kSliceGrad,
               {Ints({1, 3, 5}), g.Floats({2, 3, 3})},
               {Zeros({2, 7, 3})},
               {}});
  c.push_back({"concat.forward 1+4+2",
               op::kConcatForward,
               {g.Floats({2, 1, 3}), g.Floats({2, 4, 3}), g.Floats({2, 2, 3})},
               {Zeros({2, 7, 3})},
               {}});
  c.push_back({"concat.grad 1+4+2",
               op::kConcatGrad,
               {g.Floats({2, 7, 3})},
               {Zeros({2, 1, 3}), Zeros({2, 4, 3}), Zeros({2, 2, 3})},
               {}});
  return c;
}

}  // namespace lockstep::kernels
