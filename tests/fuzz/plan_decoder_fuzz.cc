// libFuzzer target: any byte string given to the plan decoder either decodes into a checked plan or
// raises PlanError. Anything else (a crash, a sanitizer report, another exception) is a bug.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/error.hpp"
#include "loom/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::Plan plan = loom::Plan::parse(std::string_view(reinterpret_cast<const char*>(data), size), "<fuzz>");
    (void)loom::summarize(plan);
  } catch (const loom::PlanError&) {
  }
  return 0;
}
