#include "interface_choice.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <memory>

#include "environment.hpp"
#include "log.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

std::vector<HostInterface> listInterfaces() {
  std::vector<HostInterface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owner(list, &::freeifaddrs);
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr)) {
      continue;  // needs a scope id that other hosts cannot use
    }
    HostInterface item;
    item.name = entry->ifa_name;
    item.address = net::SocketAddress(entry->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    item.up = (entry->ifa_flags & IFF_UP) != 0;
    item.loopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(item));
  }
  return out;
}

std::string listed(const std::vector<HostInterface>& interfaces) {
  std::string text;
  for (const HostInterface& item : interfaces) {
    text += (text.empty() ? "" : ", ") + item.name + " " + item.address.host() + (item.up ? "" : " (down)");
  }
  return text.empty() ? "none" : text;
}

// The first up interface that `accept` takes: IPv4 first, then IPv6.
std::optional<HostInterface> first(const std::vector<HostInterface>& interfaces, const auto& accept) {
  for (int family : {AF_INET, AF_INET6}) {
    for (const HostInterface& item : interfaces) {
      if (item.up && item.address.family() == family && accept(item)) return item;
    }
  }
  return std::nullopt;
}

}  // namespace

InterfaceFilter InterfaceFilter::parse(const std::string& text, const std::string& variable) {
  InterfaceFilter filter;
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == '^') {
    filter.exclude = true;
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest.front() == '=') {
    filter.exact = true;
    rest.remove_prefix(1);
  }
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    if (!name.empty()) filter.names.emplace_back(name);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (filter.names.empty()) {
    throw Error(ErrorCategory::kInvalidArgument,
                variable + ": expected interface names or prefixes (\"eth0\", \"^docker,lo\", \"=ib0\"), got '" + text +
                    "'");
  }
  return filter;
}

bool InterfaceFilter::matches(const std::string& name) const {
  bool listed = false;
  for (const std::string& entry : names) {
    if (exact ? name == entry : name.compare(0, entry.size(), entry) == 0) listed = true;
  }
  return listed != exclude;
}

std::optional<ChosenInterface> chooseAmong(const std::vector<HostInterface>& interfaces,
                                           const std::optional<InterfaceFilter>& filter) {
  std::optional<HostInterface> found;
  if (filter) {
    found = first(interfaces, [&](const HostInterface& item) { return filter->matches(item.name); });
  } else {
    found = first(interfaces, [](const HostInterface& item) {
      return !item.loopback && item.name.compare(0, 6, "docker") != 0;
    });
    if (!found) found = first(interfaces, [](const HostInterface& item) { return item.loopback; });
  }
  if (!found) return std::nullopt;
  return ChosenInterface{found->name, found->address.withPort(0), "the default rule", filter.has_value()};
}

const ChosenInterface& chosenInterface() {
  static const ChosenInterface chosen = [] {
    std::optional<InterfaceFilter> filter;
    std::string rule = "the default rule (no loopback or docker interface unless there is nothing else)";
    for (const char* variable : {"LOOM_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
      if (std::optional<std::string> text = processEnvironment(variable)) {
        filter = InterfaceFilter::parse(*text, variable);
        rule = std::string(variable) + "=" + *text;
        break;
      }
    }
    const std::vector<HostInterface> interfaces = listInterfaces();
    std::optional<ChosenInterface> found = chooseAmong(interfaces, filter);
    if (!found) {
      throw Error(ErrorCategory::kInvalidArgument,
                  rule + " matches no interface that is up and has an address; this host has: " + listed(interfaces));
    }
    found->rule = rule;
    logInfo("network interface " + found->name + " (" + found->address.host() + "), chosen by " + rule);
    return *found;
  }();
  return chosen;
}

}  // namespace loom
