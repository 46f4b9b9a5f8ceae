#pragma once

// Listening sockets waiting for the rank-0 Bootstrap of this process: the one UniqueId::create
// opened, or the one a launcher passed down (LOOM_BOOTSTRAP_LISTEN_FD). Handing over an open socket
// instead of a port number leaves no window in which another program could bind the port.

#include "socket.hpp"

namespace loom {

void parkListener(const net::SocketAddress& address, net::Socket socket);
// The parked socket for this address (removed from the registry), or an invalid one.
net::Socket takeParkedListener(const net::SocketAddress& address);

}  // namespace loom
