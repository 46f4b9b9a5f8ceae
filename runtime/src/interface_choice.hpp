#pragma once

// The network interface Loom's sockets use: the address the bootstrap listens on (and so, since port
// channels listen where the bootstrap does, their TCP connections) and the root's address in a new unique id.
//
// LOOM_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, in NCCL's syntax: a comma-separated list of name prefixes
// ("eth,ib"); a leading '^' excludes what matches ("^docker,lo"); a leading '=' makes the names exact
// ("=eth0", "^=docker0"). The first interface that is up, matches, and has an IPv4 address wins, else the
// first with an IPv6 one (link-local addresses left out). Without a setting, the first such interface that
// is neither loopback nor docker's ("docker*"), else loopback: as NCCL chooses.

#include <optional>
#include <string>
#include <vector>

#include "socket.hpp"

namespace loom {

// A parsed interface list; `variable` names where it came from, for errors.
struct InterfaceFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  static InterfaceFilter parse(const std::string& text, const std::string& variable);
  bool matches(const std::string& name) const;
};

struct ChosenInterface {
  std::string name;           // "eth0"
  net::SocketAddress address;  // port 0
  std::string rule;           // "LOOM_SOCKET_IFNAME=eth", "NCCL_SOCKET_IFNAME=^lo", or "the default rule"
  bool fromSetting = false;   // a variable chose it
};

// An interface of this host as getifaddrs lists it: name, address, up, loopback.
struct HostInterface {
  std::string name;
  net::SocketAddress address;
  bool up = false;
  bool loopback = false;
};

// What `interfaces` offers under `filter` (nullopt: no setting, the default rule); nullopt when nothing
// matches. Pure, for tests.
std::optional<ChosenInterface> chooseAmong(const std::vector<HostInterface>& interfaces,
                                           const std::optional<InterfaceFilter>& filter);

// This process's choice, made once (logged at LOOM_DEBUG=INFO). A setting that matches no interface is an
// InvalidArgument error naming the variable and the interfaces there are.
const ChosenInterface& chosenInterface();

}  // namespace loom
