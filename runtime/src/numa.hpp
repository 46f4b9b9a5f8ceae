#pragma once

namespace loom {

// Pins the calling thread to the CPUs of the GPU's NUMA node (the PCI device's local_cpulist), so
// the proxy polls mapped memory and drives copies from close by. Best effort: false when the
// topology cannot be read (containers, virtual machines) or the affinity cannot be set.
bool pinThreadNearDevice(int device);

}  // namespace loom
