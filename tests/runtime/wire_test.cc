#include "wire.hpp"

#include <gtest/gtest.h>

#include <random>

namespace loom::wire {
namespace {

TEST(WireTest, HeaderRoundTrip) {
  Header header{Kind::kAllGather, 7, 3, 0x0123456789abcdefull, 4096};
  HeaderBytes bytes = encodeHeader(header);
  EXPECT_EQ(bytes[0], 'L');
  EXPECT_EQ(bytes[3], 'M');
  Header back = decodeHeader(bytes.data());
  EXPECT_EQ(back.kind, Kind::kAllGather);
  EXPECT_EQ(back.source, 7u);
  EXPECT_EQ(back.aux, 3u);
  EXPECT_EQ(back.tag, 0x0123456789abcdefull);
  EXPECT_EQ(back.length, 4096u);
}

void expectProtocolError(const HeaderBytes& bytes, const std::string& fragment) {
  try {
    decodeHeader(bytes.data());
    FAIL() << "no error";
  } catch (const ProtocolError& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(WireTest, BadHeadersAreRefused) {
  HeaderBytes bytes = encodeHeader(Header{Kind::kData, 0, 0, 0, 0});
  HeaderBytes magic = bytes;
  magic[0] = 'X';
  expectProtocolError(magic, "not a Loom bootstrap message");
  HeaderBytes version = bytes;
  version[4] = 2;
  expectProtocolError(version, "protocol version 2, this build speaks version 1");
  HeaderBytes kind = bytes;
  kind[6] = 99;
  expectProtocolError(kind, "unknown message kind 99");
  kind[6] = 0;
  expectProtocolError(kind, "unknown message kind 0");
}

TEST(WireTest, HelloRoundTripAndSecretComparison) {
  Hello hello;
  for (size_t i = 0; i < kSecretBytes; ++i) hello.secret[i] = static_cast<uint8_t>(i * 7);
  hello.worldSize = 64;
  hello.listenAddress = net::SocketAddress::parse("10.1.2.3:4567", "test");
  Hello back = decodeHello(encodeHello(hello));
  EXPECT_TRUE(sameSecret(back.secret, hello.secret));
  EXPECT_EQ(back.worldSize, 64u);
  EXPECT_EQ(back.listenAddress.toString(), "10.1.2.3:4567");
  Secret other = hello.secret;
  other[15] ^= 1;
  EXPECT_FALSE(sameSecret(other, hello.secret));
  EXPECT_THROW(decodeHello(std::vector<uint8_t>(10)), ProtocolError);
}

TEST(WireTest, FramesReassembleFromAnyPieces) {
  std::mt19937 rng(5);
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> payload(rng() % 300);
    for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
    HeaderBytes header = encodeHeader(Header{Kind::kData, 1, 0, static_cast<uint64_t>(i), payload.size()});
    stream.insert(stream.end(), header.begin(), header.end());
    stream.insert(stream.end(), payload.begin(), payload.end());
    payloads.push_back(payload);
  }
  FrameReader reader;
  std::vector<std::vector<uint8_t>> got;
  size_t offset = 0;
  while (offset < stream.size()) {
    size_t piece = std::min<size_t>(1 + rng() % 50, stream.size() - offset);
    size_t used = 0;
    while (used < piece) {
      used += reader.consume(stream.data() + offset + used, piece - used, 1000);
      if (reader.ready()) {
        auto [header, payload] = reader.take();
        EXPECT_EQ(header.tag, got.size());
        got.push_back(payload);
      }
    }
    offset += piece;
  }
  EXPECT_TRUE(reader.idle());
  EXPECT_EQ(got, payloads);
}

TEST(WireTest, ReaderRefusesLengthsOverTheLimit) {
  HeaderBytes header = encodeHeader(Header{Kind::kData, 1, 0, 0, 1001});
  FrameReader reader;
  try {
    reader.consume(header.data(), header.size(), 1000);
    FAIL() << "no error";
  } catch (const ProtocolError& error) {
    EXPECT_STREQ(error.what(), "message of 1001 bytes is over the limit of 1000 bytes");
  }
}

}  // namespace
}  // namespace loom::wire
