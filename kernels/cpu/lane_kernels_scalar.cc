// The portable lane kernels (no ISA flags): one lane per vector.
#include "kernels/cpu/lane_kernels.h"

#define LS_LANE_ISA_NS scalar_lanes
#include "kernels/cpu/lane_kernels_impl.h"

namespace lockstep::kernels::cpu_internal {

const LaneKernelSet& LaneKernelsScalar() {
  return scalar_lanes::KernelSet<scalar_lanes::ScalarLanes>();
}

}  // namespace lockstep::kernels::cpu_internal
