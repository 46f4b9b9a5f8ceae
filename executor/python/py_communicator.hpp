#pragma once

// loom._native.Communicator's C++ side, shared by the bindings that take a communicator.

#include <memory>

#include "loom/communicator.hpp"

namespace loom::python {

// The communicator keeps the bootstrap alive; calls that wait on peers release the GIL.
struct PyCommunicator {
  std::shared_ptr<Communicator> communicator;
};

}  // namespace loom::python
