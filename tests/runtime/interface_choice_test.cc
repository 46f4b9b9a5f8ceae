#include "interface_choice.hpp"

#include <gtest/gtest.h>

#include "loom/error.hpp"

namespace loom {
namespace {

HostInterface interface(const std::string& name, const std::string& host, bool loopback = false, bool up = true) {
  HostInterface item;
  item.name = name;
  item.address = net::SocketAddress::parse(host.find(':') != std::string::npos ? "[" + host + "]:1" : host + ":1", name);
  item.up = up;
  item.loopback = loopback;
  return item;
}

const std::vector<HostInterface> kHost = {
    interface("lo", "127.0.0.1", true), interface("docker0", "172.17.0.1"), interface("eth0", "10.0.0.5"),
    interface("eth1", "10.1.0.5"),      interface("ib0", "fd00::5"),         interface("eth2", "10.2.0.5", false, false),
};

std::string chosen(const std::string& setting) {
  std::optional<InterfaceFilter> filter;
  if (!setting.empty()) filter = InterfaceFilter::parse(setting, "NCCL_SOCKET_IFNAME");
  std::optional<ChosenInterface> found = chooseAmong(kHost, filter);
  return found ? found->name + " " + found->address.host() : "none";
}

TEST(InterfaceChoice, WithoutASettingNeitherLoopbackNorDocker) { EXPECT_EQ(chosen(""), "eth0 10.0.0.5"); }

TEST(InterfaceChoice, PrefixesExclusionsAndExactNamesAsNcclReadsThem) {
  EXPECT_EQ(chosen("eth1"), "eth1 10.1.0.5");
  EXPECT_EQ(chosen("ib,eth1"), "eth1 10.1.0.5");  // IPv4 first among what matches
  EXPECT_EQ(chosen("ib"), "ib0 fd00::5");          // IPv6 when that is all there is
  EXPECT_EQ(chosen("^lo,docker,eth0"), "eth1 10.1.0.5");
  EXPECT_EQ(chosen("=eth"), "none");  // exact: no interface is called "eth"
  EXPECT_EQ(chosen("^=eth0,lo,docker0,eth1"), "ib0 fd00::5");
  EXPECT_EQ(chosen("eth2"), "none");  // down
}

TEST(InterfaceChoice, LoopbackWhenNothingElseIsUp) {
  const std::vector<HostInterface> only = {interface("lo", "127.0.0.1", true), interface("docker0", "172.17.0.1")};
  std::optional<ChosenInterface> found = chooseAmong(only, std::nullopt);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->name, "lo");
  EXPECT_FALSE(found->fromSetting);
}

TEST(InterfaceChoice, AnEmptyListIsAnErrorNamingTheVariable) {
  for (const std::string text : {"^", "=", ",", "^=,"}) {
    try {
      InterfaceFilter::parse(text, "LOOM_SOCKET_IFNAME");
      FAIL() << text;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("LOOM_SOCKET_IFNAME"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace loom
