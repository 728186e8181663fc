// The tensor manifest: every tensor one training step produces, in
// execution order, derived once from (ModelPlan, JobConfig).
//
// The order is part of Lockstep's canonical spec (worker/exec/README.md,
// "Execution order"): the batch (INPUT, LABEL), each layer's output in
// forward order (the loss last), the gradients layer by layer in reverse
// order, then each parameter after its optimizer update followed by its
// optimizer state. The capture policy then selects which of those tensors,
// and which steps, are fingerprinted.
//
// Thread-safety: every function here is pure and thread-safe.
#ifndef LOCKSTEP_MODEL_MANIFEST_H_
#define LOCKSTEP_MODEL_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"
#include "model/plan.h"

namespace lockstep::model {

// Slot names of manifest entries.
inline constexpr char kSlotSum[] = "sum";  // accumulated output gradient
inline constexpr char kSlotVelocity[] = "velocity";  // momentum state
inline constexpr char kSlotAdamM[] = "m";            // Adam first moment
inline constexpr char kSlotAdamV[] = "v";            // Adam second moment
inline constexpr char kSlotRunning[] = "running";
inline constexpr char kSlotMask[] =
    "mask";  // DROPOUT's mask  // BATCH_NORM mean, variance
// Op name of the GRAD_NORM entry (config.optimizer.clip_grad_norm > 0).
inline constexpr char kClipGradNormOp[] = "clip_grad_norm";
// Op name of the accumulated-gradient entry (computed with add.forward).
inline constexpr char kGradAccumulateOp[] = "grad_accumulate";
// Op names of the batch entries.
inline constexpr char kInputOp[] = "input";
inline constexpr char kLabelsOp[] = "labels";

// "input0", "input1", ...: the slot of the gradient w.r.t. input i.
std::string InputSlot(int i);

// One use of a layer's output: consumer layer `layer` reads it as its input
// number `input`.
struct Consumer {
  int layer = 0;
  int input = 0;
};

// For each layer, the layers that read its output and pass a gradient back
// (not COMPARE's inputs or WHERE's condition: GraphInputTakesGradient),
// sorted by (consumer layer index, input position): the order in which
// gradient contributions are summed. REQUIRES: plan's input indices in [kModelInput, layer index).
std::vector<std::vector<Consumer>> ComputeConsumers(const ModelPlan& plan);

// Which layer outputs carry a gradient, per layer: every layer of op sets
// v1/v2 (so their manifests stay as they were), a layer with parameters
// (PARAMETER), and a graph op with an input that takes a gradient. A
// CONSTANT, and graph ops of constants only, carry none.
std::vector<bool> CarriesGradient(const ModelPlan& plan);

// Whether the backward pass forms a gradient for input `k` of `layer`: its
// producer carries a gradient (CarriesGradient; never the model input) and
// the op passes one to that input (not GATHER's indices).
bool InputTakesGradient(const ModelPlan& plan, const std::vector<bool>& carries,
                        const LayerPlan& layer, int k);

// ComputeConsumers restricted to the uses whose input takes a gradient: the
// contributions summed into a layer's output gradient.
std::vector<std::vector<Consumer>> GradientConsumers(const ModelPlan& plan);

// Kernel op names of a layer kind.
struct LayerOps {
  const char* forward = "";      // main forward kernel (the ACTIVATION's op)
  const char* grad_input = "";   // gradient w.r.t. each input
  const char* grad_weight = "";  // empty for ops without a weight
};
// INVALID_ARGUMENT for LAYER_OP_UNSPECIFIED or an unknown value.
absl::StatusOr<LayerOps> OpsOfLayer(lockstep::v1::LayerOp op);

// The optimizer's op name ("sgd.update", ...) and its state slots in order
// (none, {"velocity"}, {"m", "v"}). INVALID_ARGUMENT for an unknown kind.
struct OptimizerOps {
  const char* op = "";
  std::vector<std::string> state_slots;
};
absl::StatusOr<OptimizerOps> OpsOfOptimizer(lockstep::v1::OptimizerKind kind);

// Every tensor of one step in execution order, before the capture policy
// filters it (= the manifest entries under EVERY_STEP); entry.index is the
// position in this list. INVALID_ARGUMENT naming the layer when the plan is
// not executable (a forward reference, a wrong input or parameter count, a
// last layer that is not SOFTMAX_XENT, ...).
absl::StatusOr<std::vector<lockstep::v1::ManifestEntry>> StepTensors(
    const ModelPlan& plan, const lockstep::v1::JobConfig& config);

// Whether `policy` fingerprints tensors like `entry` (FORWARD_ONLY keeps
// only PHASE_INPUT and PHASE_FORWARD entries).
bool PolicyCapturesEntry(const lockstep::v1::CapturePolicy& policy,
                         const lockstep::v1::ManifestEntry& entry);

// The captured steps, in increasing order: every step, or for
// EVERY_KTH_STEP 0, k, 2k, ... and the last step. INVALID_ARGUMENT naming
// config.capture.every_k when k < 1, or config.steps when steps < 1.
absl::StatusOr<std::vector<int>> CapturedSteps(
    const lockstep::v1::CapturePolicy& policy, int steps);

// The manifest of a job: StepTensors filtered by the capture policy and
// re-indexed, steps, captured_steps (listed for EVERY_KTH_STEP; empty, which
// means every step, otherwise), and manifest_digest.
absl::StatusOr<lockstep::v1::TensorManifest> BuildManifest(
    const ModelPlan& plan, const lockstep::v1::JobConfig& config);

// The manifest digest: XXH3-128 (common/digest.h) of the deterministic
// protobuf serialization of `manifest` with manifest_digest cleared.
std::string ComputeManifestDigest(const lockstep::v1::TensorManifest& manifest);

// The captured steps of a manifest, expanded (captured_steps, or 0 ..
// steps - 1 when it is empty).
std::vector<int> ExpandCapturedSteps(
    const lockstep::v1::TensorManifest& manifest);

// One line naming an entry, for messages and reports:
//   "#7 layer \"fc1\" GRAD_WEIGHT dense.grad_weight float32[4, 8]"
// with " slot m" appended when the slot is set.
std::string DescribeEntry(const lockstep::v1::ManifestEntry& entry);

}  // namespace lockstep::model

#endif  // LOCKSTEP_MODEL_MANIFEST_H_
