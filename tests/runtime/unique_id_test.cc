#include "loom/unique_id.hpp"

#include <gtest/gtest.h>

#include "loom/error.hpp"

namespace loom {
namespace {

TEST(UniqueIdTest, BytesAndHexRoundTrip) {
  UniqueId id = UniqueId::create("127.0.0.1");
  UniqueId::Bytes bytes = id.toBytes();
  EXPECT_EQ(bytes.size(), 40u);
  EXPECT_EQ(UniqueId::fromBytes(bytes), id);
  std::string hex = id.toHex();
  EXPECT_EQ(hex.size(), 80u);
  EXPECT_EQ(UniqueId::fromHex(hex), id);
  EXPECT_EQ(id.address(), "127.0.0.1:" + std::to_string(id.port()));
  EXPECT_NE(id.port(), 0);
}

TEST(UniqueIdTest, EverySecretIsNew) {
  EXPECT_NE(UniqueId::create("127.0.0.1").secret(), UniqueId::create("127.0.0.1").secret());
  EXPECT_NE(UniqueId::randomSecret(), UniqueId::randomSecret());
}

TEST(UniqueIdTest, FromAddressKeepsAddressAndSecret) {
  UniqueId::Secret secret = UniqueId::parseSecret("00112233445566778899aabbccddeeff", "test");
  UniqueId id = UniqueId::fromAddress("127.0.0.1:29501", secret);
  EXPECT_EQ(id.address(), "127.0.0.1:29501");
  EXPECT_EQ(id.secret(), secret);
  EXPECT_EQ(id.toHex().substr(id.toHex().size() - 32), "00112233445566778899aabbccddeeff");
  UniqueId v6 = UniqueId::fromAddress("[::1]:29501", secret);
  EXPECT_EQ(v6.address(), "[::1]:29501");
  EXPECT_EQ(UniqueId::fromHex(v6.toHex()), v6);
}

void expectInvalid(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    FAIL() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(UniqueIdTest, MalformedInputIsRefused) {
  UniqueId::Bytes bytes = UniqueId::fromAddress("127.0.0.1:29501", UniqueId::Secret{}).toBytes();
  expectInvalid([&] { UniqueId::fromBytes(std::span<const uint8_t>(bytes.data(), 39)); }, "39 bytes, expected 40");
  UniqueId::Bytes wrongMagic = bytes;
  wrongMagic[0] = 'X';
  expectInvalid([&] { UniqueId::fromBytes(wrongMagic); }, "wrong magic");
  UniqueId::Bytes wrongVersion = bytes;
  wrongVersion[3] = 9;
  expectInvalid([&] { UniqueId::fromBytes(wrongVersion); }, "version 9, expected 1");
  UniqueId::Bytes wrongFamily = bytes;
  wrongFamily[4] = 5;
  expectInvalid([&] { UniqueId::fromBytes(wrongFamily); }, "unknown address family 5");
  expectInvalid([&] { UniqueId::fromHex("zz"); }, "expected 80 hex digits, got 2");
  std::string hex = UniqueId::fromBytes(bytes).toHex();
  hex[10] = 'g';
  expectInvalid([&] { UniqueId::fromHex(hex); }, "hex digits");
  expectInvalid([&] { UniqueId::parseSecret("abc", "LOOM_BOOTSTRAP_SECRET"); }, "LOOM_BOOTSTRAP_SECRET: expected 32");
  expectInvalid([&] { UniqueId::fromAddress("localhost", UniqueId::Secret{}); }, "no port");
  expectInvalid([&] { UniqueId::fromAddress("127.0.0.1:0", UniqueId::Secret{}); }, "1 to 65535");
  expectInvalid([&] { UniqueId::fromAddress("127.0.0.1:http", UniqueId::Secret{}); }, "not a number");
  expectInvalid([&] { UniqueId::fromAddress("::1:80", UniqueId::Secret{}); }, "brackets");
}

}  // namespace
}  // namespace loom
