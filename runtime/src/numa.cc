#include "numa.hpp"

#include <pthread.h>
#include <sched.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gpu.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

// "0-15,32-47" -> the set; false when the text does not parse.
bool parseCpuList(const std::string& text, cpu_set_t& set) {
  CPU_ZERO(&set);
  std::stringstream ranges(text);
  std::string range;
  int count = 0;
  while (std::getline(ranges, range, ',')) {
    int first = -1, last = -1;
    char dash = 0;
    std::stringstream in(range);
    if (!(in >> first)) return false;
    last = first;
    if (in >> dash && (dash != '-' || !(in >> last))) return false;
    for (int cpu = first; cpu <= last && cpu < CPU_SETSIZE; ++cpu, ++count) CPU_SET(cpu, &set);
  }
  return count > 0;
}

}  // namespace

bool pinThreadNearDevice(int device) {
  std::string busId;
  try {
    busId = gpu::pciBusId(device);
  } catch (const Error&) {
    return false;
  }
  std::ifstream file("/sys/bus/pci/devices/" + busId + "/local_cpulist");
  std::string list;
  cpu_set_t set;
  if (!std::getline(file, list) || !parseCpuList(list, set)) return false;
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace loom
