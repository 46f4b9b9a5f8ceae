#pragma once

// How soon a TCP link that stopped carrying anything is an error: LOOM_LINK_TIMEOUT_MS (default 2000; 0 turns
// it off). Every TCP socket of Loom (the bootstrap's, the port channels') sends keepalive probes after a second
// of silence, and TCP_USER_TIMEOUT ends it once nothing has been acknowledged for the setting: a cut link or a
// peer host that vanished is an error within about the setting (measured: 1.3 to 2.3 s with the default, idle or
// busy). A flap survives when it ends before the silence reaches the setting: the kernel counts from the last
// acknowledgement (on an idle link up to a probe interval before the flap) and retransmits with backoff (after an
// outage of t the next try comes up to about t later), so flaps under about half the setting are safe.

#include <cstdint>
#include <string>

#include "socket.hpp"

namespace loom {

int64_t linkTimeoutMs();  // parsed once; a malformed value is an error naming the variable
void keepLinkAlive(int fd);

// Whether a socket error means the link, not the peer's process, failed: nothing acknowledged in time. (No
// route, EHOSTUNREACH / ENETUNREACH, is only for now: the sockets wait for the timeout to decide.)
bool isLostLinkError(int error);

// "the link to rank 2 (10.1.0.1:40122 on eth1 to 10.1.0.2:39001) was lost: nothing sent was acknowledged
// within LOOM_LINK_TIMEOUT_MS=2000 ms (...)" for the socket `fd` connected to `remote`.
std::string lostLinkText(int fd, const std::string& peer, const net::SocketAddress& remote);

}  // namespace loom
