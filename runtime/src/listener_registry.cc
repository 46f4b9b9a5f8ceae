#include "listener_registry.hpp"

#include <map>
#include <mutex>

namespace loom {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<net::SocketAddress::Packed, net::Socket> sockets;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

void parkListener(const net::SocketAddress& address, net::Socket socket) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.sockets[address.pack()] = std::move(socket);
}

net::Socket takeParkedListener(const net::SocketAddress& address) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto found = r.sockets.find(address.pack());
  if (found == r.sockets.end()) return net::Socket();
  net::Socket socket = std::move(found->second);
  r.sockets.erase(found);
  return socket;
}

}  // namespace loom
