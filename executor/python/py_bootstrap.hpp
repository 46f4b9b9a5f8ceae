#pragma once

#include <memory>

#include "loom/bootstrap.hpp"
#include "loom/error.hpp"

namespace loom::python {

// The Python object owns its Bootstrap through a shared pointer that every call copies before it
// lets the GIL go, so close() from another thread never destroys an object that a call still uses.
class PyBootstrap {
 public:
  explicit PyBootstrap(Bootstrap bootstrap) : bootstrap_(std::make_shared<Bootstrap>(std::move(bootstrap))) {}
  explicit PyBootstrap(std::shared_ptr<Bootstrap> bootstrap) : bootstrap_(std::move(bootstrap)) {}

  std::shared_ptr<Bootstrap> get() const {
    if (!bootstrap_) throw Error(ErrorCategory::kInvalidArgument, "the bootstrap is closed");
    return bootstrap_;
  }
  void close() { bootstrap_.reset(); }
  bool closed() const { return !bootstrap_; }

 private:
  std::shared_ptr<Bootstrap> bootstrap_;
};

}  // namespace loom::python
