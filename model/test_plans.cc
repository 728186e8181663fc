#include "model/test_plans.h"

#include <string>
#include <utility>
#include <vector>

namespace lockstep::model::testing {

namespace v1 = ::lockstep::v1;

namespace {

LayerPlan Layer(int index, std::string name, v1::LayerOp op,
                std::vector<int> inputs,
                std::vector<std::vector<int64_t>> input_shapes,
                std::vector<int64_t> output_shape) {
  LayerPlan l;
  l.index = index;
  l.name = std::move(name);
  l.op = op;
  l.inputs = std::move(inputs);
  l.input_shapes = std::move(input_shapes);
  l.output_shape = std::move(output_shape);
  return l;
}

ParamPlan Param(const char* name, v1::TensorRole role,
                std::vector<int64_t> shape, int64_t fan_in, int64_t fan_out) {
  ParamPlan p;
  p.name = name;
  p.role = role;
  p.shape = std::move(shape);
  p.fan_in = fan_in;
  p.fan_out = fan_out;
  return p;
}

void AddDense(ModelPlan& m, const std::string& name, int input,
              std::vector<int64_t> in_shape, int64_t units) {
  const int index = static_cast<int>(m.layers.size());
  int64_t features = 1;
  for (size_t i = 1; i < in_shape.size(); ++i) features *= in_shape[i];
  const int64_t n = in_shape[0];
  LayerPlan l = Layer(index, name, v1::DENSE, {input}, {in_shape}, {n, units});
  l.params.push_back(
      Param("weight", v1::WEIGHT, {features, units}, features, units));
  l.params.push_back(Param("bias", v1::BIAS, {units}, features, units));
  m.layers.push_back(std::move(l));
}

int64_t CountParams(const ModelPlan& m) {
  int64_t total = 0;
  for (const LayerPlan& l : m.layers) {
    for (const ParamPlan& p : l.params) {
      int64_t e = 1;
      for (int64_t d : p.shape) e *= d;
      total += e;
    }
  }
  return total;
}

}  // namespace

ModelPlan MlpPlan(int64_t n) {
  ModelPlan m;
  m.model_name = "mlp";
  m.input_shape = {n, 6};
  m.num_classes = 3;
  AddDense(m, "fc1", kModelInput, {n, 6}, 8);
  m.layers.push_back(Layer(1, "relu1", v1::RELU, {0}, {{n, 8}}, {n, 8}));
  AddDense(m, "fc2", 1, {n, 8}, 3);
  m.layers.push_back(Layer(3, "loss", v1::SOFTMAX_XENT, {2}, {{n, 3}}, {1}));
  m.parameter_count = CountParams(m);
  return m;
}

ModelPlan ConvResPlan(int64_t n) {
  ModelPlan m;
  m.model_name = "convres";
  m.input_shape = {n, 2, 6, 6};
  m.num_classes = 4;
  const std::vector<int64_t> a = {n, 3, 6, 6};
  {
    LayerPlan l =
        Layer(0, "conv1", v1::CONV2D, {kModelInput}, {m.input_shape}, a);
    l.params.push_back(Param("weight", v1::WEIGHT, {3, 2, 3, 3}, 18, 27));
    l.params.push_back(Param("bias", v1::BIAS, {3}, 18, 27));
    l.attrs.pad_top = l.attrs.pad_bottom = l.attrs.pad_left =
        l.attrs.pad_right = 1;
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(Layer(1, "relu1", v1::RELU, {0}, {a}, a));
  {
    LayerPlan l = Layer(2, "conv2", v1::CONV2D, {1}, {a}, a);
    l.params.push_back(Param("weight", v1::WEIGHT, {3, 3, 3, 3}, 27, 27));
    l.attrs.pad_top = l.attrs.pad_bottom = l.attrs.pad_left =
        l.attrs.pad_right = 1;
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(Layer(3, "add", v1::ADD, {2, 1}, {a, a}, a));
  {
    LayerPlan l = Layer(4, "pool", v1::MAX_POOL2D, {3}, {a}, {n, 3, 3, 3});
    l.attrs.kernel_h = l.attrs.kernel_w = 2;
    l.attrs.stride_h = l.attrs.stride_w = 2;
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(
      Layer(5, "up", v1::RESIZE_BILINEAR, {4}, {{n, 3, 3, 3}}, {n, 3, 5, 5}));
  m.layers.push_back(
      Layer(6, "gap", v1::GLOBAL_AVG_POOL, {5}, {{n, 3, 5, 5}}, {n, 3}));
  AddDense(m, "fc", 6, {n, 3}, 4);
  m.layers.push_back(Layer(8, "loss", v1::SOFTMAX_XENT, {7}, {{n, 4}}, {1}));
  m.parameter_count = CountParams(m);
  return m;
}

v1::JobConfig BaseConfig(int64_t batch, int steps) {
  v1::JobConfig c;
  c.set_seed(7);
  c.set_batch_size(static_cast<int32_t>(batch));
  c.set_steps(steps);
  c.mutable_optimizer()->set_kind(v1::SGD);
  c.mutable_optimizer()->set_learning_rate(0.1f);
  c.set_determinism(v1::CANONICAL);
  c.set_backend(v1::CPU);
  return c;
}

}  // namespace lockstep::model::testing
