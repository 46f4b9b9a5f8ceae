// The TCP transport: any two hosts, one socket per direction. The sending side frames each write
// and value and sends it from the calling thread (the proxy thread of a port channel), staging
// device memory through pinned host memory; a thread on the receiving side applies the frames in
// order to the registrations they name and answers flushes. tcp_connection.hpp has the wire format.

#include "tcp_connection.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "byte_io.hpp"
#include "connection_factory.hpp"
#include "deadline.hpp"
#include "errno_text.hpp"
#include "gpu.hpp"
#include "log.hpp"
#include "loom/error.hpp"
#include "memory_table.hpp"
#include "registered_memory_impl.hpp"

namespace loom::tcp {
namespace {

// Device memory moves through pinned host memory in pieces of this size. Host memory is sent in
// pieces of it too, so that a send's timeout measures progress, not the size of the write.
constexpr uint64_t kChunkBytes = uint64_t{4} << 20;
// How long the accepting side gives a connection to present its hello before refusing it and going
// on waiting for its peer (a stranger that connects and says nothing must not hold up the setup).
constexpr int64_t kHelloTimeoutMs = 2000;
// A closing connection's goodbye gets this long to go out (the peer may be gone).
constexpr int64_t kGoodbyeSendMs = 100;
// How long a sending half that sees the peer's close waits for the receiving half to read a goodbye.
constexpr int64_t kGoodbyePatienceMs = 200;
constexpr uint32_t kEndpointMagic = 0x4c544345u;

// Byte by byte rather than ByteWriter::putBytes: GCC 12 warns falsely (-Wstringop-overflow) about
// the vector insert that putBytes inlines after a put.
void putEach(ByteWriter& out, std::span<const uint8_t> bytes) {
  for (uint8_t byte : bytes) out.put(byte);
}

std::string rankText(int rank) { return "rank " + std::to_string(rank); }

std::string pairText(int fromRank, int toRank) {
  return "tcp connection from rank " + std::to_string(fromRank) + " to rank " + std::to_string(toRank);
}

// Waits for `events` on fd until the deadline; false when the deadline passed first.
bool pollFor(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, deadline.remainingMs());
    if (ready > 0) return true;
    if (ready == 0 && deadline.expired()) return false;
    if (ready < 0 && errno != EINTR) throw Error(ErrorCategory::kSystem, "poll: " + errnoText(errno));
  }
}

// The reader of a value polls the word and then reads the data with acquire ordering, so the data
// this thread wrote before (memcpy, or recv() into the buffer) must be visible first: a release.
void storeRelease(uint8_t* word, uint64_t value) {
  if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) == 0) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word)).store(value, std::memory_order_release);
    return;
  }
  // A registration that starts off an 8-byte boundary cannot hold an atomic word; a fence orders it.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(word, &value, sizeof(value));
}

// An eventfd that tells the receiving thread to stop: its poll() watches it beside the socket.
class WakeEvent {
 public:
  WakeEvent() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0) throw Error(ErrorCategory::kSystem, "eventfd: " + errnoText(errno));
  }
  ~WakeEvent() { ::close(fd_); }
  WakeEvent(const WakeEvent&) = delete;
  WakeEvent& operator=(const WakeEvent&) = delete;

  int fd() const { return fd_; }
  void signal() const {
    const uint64_t one = 1;
    // EAGAIN means the counter is full, which is signalled already.
    if (::write(fd_, &one, sizeof(one)) != ssize_t(sizeof(one)) && errno != EAGAIN) {
      logWarning("eventfd write: " + errnoText(errno));
    }
  }

 private:
  int fd_;
};

// The receiving half of a connection: a thread that reads the peer's frames, applies them in order
// to this process's registrations and answers flushes. A frame that names memory this process does
// not have, or a range outside it, is logged and ends the connection: the thread closes the socket,
// so the peer's next write or flush fails instead of waiting for an answer. Such an end, or a stream
// that ends without the goodbye a closing peer sends (reset, cut, or closed by a process that died),
// goes to `failed`; the goodbye does not.
class Receiver {
 public:
  Receiver(int localRank, int remoteRank, net::Socket incoming, Connection::FailureSink failed)
      : where_(pairText(remoteRank, localRank)),
        peer_(rankText(remoteRank)),
        socket_(std::move(incoming)),
        failed_(std::move(failed)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Receiver() {
    wake_.signal();
    thread_.join();
  }
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // Whether the peer said goodbye, waiting up to `patience` for the stream to end: for the sending
  // half, which may see the peer's close before this half reads the goodbye that came before it.
  bool saidGoodbye(std::chrono::milliseconds patience) const {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (end_.load(std::memory_order_acquire) == End::kRunning && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return end_.load(std::memory_order_acquire) == End::kGoodbye;
  }

 private:
  enum class End : uint8_t { kRunning, kGoodbye, kOther };
  // Each step returns false when the connection ends: the peer closed it, it is being destroyed, or
  // a bad frame came.
  void run();
  bool waitFor(short events);
  bool readExact(void* data, uint64_t bytes);
  bool writeExact(const void* data, uint64_t bytes);
  bool apply(const FrameHeader& header);
  bool applyWrite(const FrameHeader& header);
  bool applyValue(const FrameHeader& header);
  std::optional<LocalMemory> target(const FrameHeader& header, uint64_t bytes);
  bool refuse(const std::string& why) const;
  void useDevice(int device);

  std::string where_;
  std::string peer_;
  net::Socket socket_;  // only the thread touches it, and closes it when it ends
  Connection::FailureSink failed_;
  std::atomic<End> end_{End::kRunning};
  WakeEvent wake_;
  gpu::PinnedHostBuffer staging_;  // for device memory; allocated on first use
  int device_ = -1;
  std::thread thread_;
};

void Receiver::run() {
  try {
    std::array<uint8_t, kFrameHeaderBytes> header{};
    while (readExact(header.data(), header.size()) && apply(decodeFrame(header))) {
    }
  } catch (const std::exception& error) {
    logWarning(where_ + ": receiving: " + error.what() + "; closing the connection");
    failed_(where_ + ": receiving: " + error.what());
  }
  End expected = End::kRunning;
  end_.compare_exchange_strong(expected, End::kOther, std::memory_order_acq_rel);
  // Closing (rather than only returning) tells the peer at once.
  socket_.reset();
}

// Waits until the socket is ready for `events` (or has failed); false when the connection goes.
bool Receiver::waitFor(short events) {
  std::array<pollfd, 2> entries{pollfd{socket_.fd(), events, 0}, pollfd{wake_.fd(), POLLIN, 0}};
  while (::poll(entries.data(), entries.size(), -1) < 0) {
    if (errno != EINTR) throw Error(ErrorCategory::kSystem, "poll: " + errnoText(errno));
  }
  return entries[1].revents == 0;
}

bool Receiver::readExact(void* data, uint64_t bytes) {
  auto* out = static_cast<uint8_t*>(data);
  for (uint64_t done = 0; done < bytes;) {
    bool reset = false;
    const std::optional<size_t> got = socket_.readSome(out + done, bytes - done, peer_, &reset);
    if (got && *got == 0) {
      // The peer's goodbye came first, else this is a failed link.
      failed_(where_ + ": receiving: the stream from " + peer_ +
              (reset  ? " was reset"
               : done ? " ended " + std::to_string(done) + " bytes into " + std::to_string(bytes)
                      : " ended without a goodbye (its process is gone, or the link was cut)"));
      return false;
    }
    if (got) {
      done += *got;
    } else if (!waitFor(POLLIN)) {
      return false;
    }
  }
  return true;
}

bool Receiver::writeExact(const void* data, uint64_t bytes) {
  const auto* in = static_cast<const uint8_t*>(data);
  for (uint64_t done = 0; done < bytes;) {
    std::optional<size_t> sent;
    try {
      sent = socket_.writeSome(in + done, bytes - done, peer_);
    } catch (const Error& error) {
      if (error.category() == ErrorCategory::kTransport) return false;  // the peer went: stop quietly
      throw;
    }
    if (sent) {
      done += *sent;
    } else if (!waitFor(POLLOUT)) {
      return false;
    }
  }
  return true;
}

bool Receiver::apply(const FrameHeader& header) {
  switch (header.kind) {
    case FrameKind::kWrite:
      return applyWrite(header);
    case FrameKind::kValue:
      return applyValue(header);
    case FrameKind::kGoodbye:
      end_.store(End::kGoodbye, std::memory_order_release);
      return false;
    case FrameKind::kFlush: {
      // Frames are applied synchronously and in order, so everything before this one is done.
      ByteWriter ack;
      ack.put(header.argument);
      const std::vector<uint8_t> bytes = ack.take();
      return writeExact(bytes.data(), bytes.size());
    }
  }
  return refuse("unknown frame kind " + std::to_string(int(header.kind)));
}

// The registration a frame names, when [offset, offset + bytes) lies inside it; else refused.
std::optional<LocalMemory> Receiver::target(const FrameHeader& header, uint64_t bytes) {
  // Built only for a refusal: this runs for every frame.
  auto what = [&] {
    return std::string(header.kind == FrameKind::kWrite ? "write" : "value") + " to registration " +
           std::to_string(header.id);
  };
  std::optional<LocalMemory> memory = MemoryTable::process().find(header.id);
  if (!memory) {
    refuse(what() + ", which this process does not have");
    return std::nullopt;
  }
  if (!memory->transports.has(Transport::kTcp)) {
    refuse(what() + ", which is not registered for tcp");
    return std::nullopt;
  }
  if (header.offset > memory->bytes || bytes > memory->bytes - header.offset) {
    refuse(what() + ": range [" + std::to_string(header.offset) + ", " + std::to_string(header.offset) + " + " +
           std::to_string(bytes) + ") is outside its " + std::to_string(memory->bytes) + " bytes");
    return std::nullopt;
  }
  return memory;
}

bool Receiver::refuse(const std::string& why) const {
  logWarning(where_ + ": bad frame from " + peer_ + ": " + why + "; closing the connection");
  failed_(where_ + ": bad frame from " + peer_ + ": " + why);
  return false;
}

void Receiver::useDevice(int device) {
  if (device_ != device) {
    gpu::setDevice(device);
    device_ = device;
  }
  if (staging_.data() == nullptr) staging_ = gpu::PinnedHostBuffer(kChunkBytes, false);
}

bool Receiver::applyWrite(const FrameHeader& header) {
  const std::optional<LocalMemory> memory = target(header, header.argument);
  if (!memory) return false;
  auto* dst = static_cast<uint8_t*>(memory->data) + header.offset;
  // Host memory takes the bytes straight from the socket; device memory goes through staging.
  if (memory->location == MemoryLocation::kHost) return readExact(dst, header.argument);
  useDevice(memory->deviceId);
  for (uint64_t done = 0; done < header.argument;) {
    const uint64_t piece = std::min(kChunkBytes, header.argument - done);
    if (!readExact(staging_.data(), piece)) return false;
    gpu::copy(dst + done, staging_.data(), piece);
    done += piece;
  }
  return true;
}

bool Receiver::applyValue(const FrameHeader& header) {
  if (header.offset % 8 != 0) {
    return refuse("value to registration " + std::to_string(header.id) + " at offset " + std::to_string(header.offset) +
                  ", which is not 8-byte aligned");
  }
  const std::optional<LocalMemory> memory = target(header, 8);
  if (!memory) return false;
  auto* word = static_cast<uint8_t*>(memory->data) + header.offset;
  if (memory->location == MemoryLocation::kHost) {
    storeRelease(word, header.argument);
    return true;
  }
  useDevice(memory->deviceId);
  std::memcpy(staging_.data(), &header.argument, sizeof(header.argument));
  // gpu::copy is synchronous: the copies of earlier writes are complete before this one starts.
  gpu::copy(word, staging_.data(), sizeof(header.argument));
  return true;
}

// The sending half, and the Connection the runtime sees. Every call sends from the calling thread
// under a mutex, so calls from several threads interleave whole frames.
class TcpConnection final : public Connection {
 public:
  TcpConnection(int localRank, int remoteRank, net::Socket outgoing, net::Socket incoming, int64_t sendTimeoutMs)
      : Connection(localRank, remoteRank),
        peer_(rankText(remoteRank)),
        outgoing_(std::move(outgoing)),
        sendTimeoutMs_(sendTimeoutMs),
        receiver_(localRank, remoteRank, std::move(incoming), [this](const std::string& why) { failed(why); }) {}

  // Says goodbye, so that the peer takes the end of the stream for an orderly close (best effort: the
  // peer may be gone already).
  ~TcpConnection() override {
    std::lock_guard lock(mutex_);
    if (!broken_.empty()) return;
    try {
      const std::vector<uint8_t> bytes = encodeFrame({FrameKind::kGoodbye, 0, 0, 0});
      outgoing_.sendAll(bytes.data(), bytes.size(), Deadline(kGoodbyeSendMs), peer_);
    } catch (const std::exception&) {
      // Nobody to tell.
    }
  }

  Transport transport() const override { return Transport::kTcp; }

  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes) override {
    checkWrite(dst, dstOffset, src, srcOffset, bytes);
    if (bytes == 0) return;
    const auto* from = static_cast<const uint8_t*>(src.data()) + srcOffset;
    const bool device = src.location() == MemoryLocation::kDevice;
    std::lock_guard lock(mutex_);
    guarded("write", [&] {
      sendFrame({FrameKind::kWrite, dst.impl().id, dstOffset, bytes});
      if (device) {
        sendFromDevice(from, bytes);
      } else {
        sendHost(from, bytes);
      }
      ++posted_;
    });
  }

  void writeValue(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) override {
    checkValue(dst, dstOffset);
    std::lock_guard lock(mutex_);
    guarded("writeValue", [&] {
      sendFrame({FrameKind::kValue, dst.impl().id, dstOffset, value});
      ++posted_;
    });
  }

  // Sends are synchronous: a write has copied its source into the socket before it returns.
  void finishReads(int64_t) override {}

  void flush(int64_t timeoutMs) override {
    std::lock_guard lock(mutex_);
    const Deadline deadline(timeoutMs);
    bool done = true;
    guarded("flush", [&] { done = awaitAcks(deadline); });
    if (!done) {
      throw Error(ErrorCategory::kTimeout, where("flush") + ": " + peer_ + " has not acknowledged " +
                                               std::to_string(posted_ - acked_) + " of " + std::to_string(posted_) +
                                               " operations after " + std::to_string(timeoutMs) + " ms");
    }
  }

 private:
  std::string where(const char* operation) const { return pairText(localRank(), remoteRank()) + ": " + operation; }

  // Runs one step on the outgoing stream. A failure part-way may leave a frame half sent, so the
  // stream is unusable from then on: later calls fail at once, repeating the first failure. A
  // transport failure (the peer closed or reset the stream) is the link's failure too, unless the
  // peer said goodbye.
  template <typename Body>
  void guarded(const char* operation, Body&& body) {
    if (!broken_.empty()) {
      throw Error(ErrorCategory::kTransport, where(operation) + ": unusable after an earlier failure: " + broken_);
    }
    if (peerClosed()) {
      broken_ = peer_ + " closed its connection";
      linkFailed(where(operation) + ": " + broken_);
      throw Error(ErrorCategory::kTransport, where(operation) + ": " + broken_);
    }
    try {
      body();
    } catch (const Error& error) {
      broken_ = error.what();
      if (error.category() == ErrorCategory::kTransport) linkFailed(where(operation) + ": " + broken_);
      throw Error(error.category(), where(operation) + ": " + broken_);
    } catch (const std::exception& error) {
      broken_ = error.what();
      throw;
    }
  }

  // The outgoing stream failed: a failed link unless the peer closed on purpose (its goodbye, on the
  // other stream, may be read a moment after this half saw the close).
  void linkFailed(const std::string& why) {
    if (!receiver_.saidGoodbye(std::chrono::milliseconds(kGoodbyePatienceMs))) failed(why);
  }

  // A peer that closed its end shows as a hang-up on the outgoing socket. Without this check the
  // first write after that would vanish into the socket buffer and seem to succeed.
  bool peerClosed() const {
    pollfd entry{outgoing_.fd(), POLLRDHUP, 0};
    const int ready = ::poll(&entry, 1, 0);
    if (ready < 0 && errno != EINTR) throw Error(ErrorCategory::kSystem, where("poll") + ": " + errnoText(errno));
    return ready > 0 && (entry.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  void send(const void* data, uint64_t bytes) {
    try {
      outgoing_.sendAll(data, bytes, Deadline(sendTimeoutMs_), peer_);
    } catch (const Error& error) {
      if (error.category() != ErrorCategory::kTransport) throw;
      throw Error(ErrorCategory::kTransport, peer_ + " closed its connection (" + error.what() + ")");
    }
  }

  void sendFrame(const FrameHeader& header) {
    const std::vector<uint8_t> bytes = encodeFrame(header);
    send(bytes.data(), bytes.size());
  }

  // In pieces, each with a fresh deadline: the timeout is about progress, not the write's size.
  void sendHost(const uint8_t* src, uint64_t bytes) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t piece = std::min(kChunkBytes, bytes - done);
      send(src + done, piece);
      done += piece;
    }
  }

  void sendFromDevice(const uint8_t* src, uint64_t bytes) {
    if (staging_.data() == nullptr) staging_ = gpu::PinnedHostBuffer(kChunkBytes, false);
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t piece = std::min(kChunkBytes, bytes - done);
      gpu::copy(staging_.data(), src + done, piece);
      send(staging_.data(), piece);
      done += piece;
    }
  }

  // Asks the peer to acknowledge everything posted so far and waits for it; false on timeout. Acks
  // of earlier flushes that timed out may arrive first; each carries the number of operations the
  // peer had applied, so any ack at or past the target will do.
  bool awaitAcks(const Deadline& deadline) {
    if (acked_ == posted_) return true;
    if (requested_ < posted_) {
      sendFrame({FrameKind::kFlush, 0, 0, posted_});
      requested_ = posted_;
    }
    while (acked_ < posted_) {
      if (!receiveAck(deadline)) return false;
    }
    return true;
  }

  bool receiveAck(const Deadline& deadline) {
    while (ackFilled_ < kAckBytes) {
      const std::optional<size_t> got = outgoing_.readSome(ack_.data() + ackFilled_, kAckBytes - ackFilled_, peer_);
      if (got && *got == 0) {
        throw Error(ErrorCategory::kTransport, peer_ + " closed its connection with " +
                                                   std::to_string(posted_ - acked_) + " operations unacknowledged");
      }
      if (got) {
        ackFilled_ += *got;
      } else if (!pollFor(outgoing_.fd(), POLLIN, deadline)) {
        return false;
      }
    }
    ackFilled_ = 0;
    ByteReader in(ack_, "flush acknowledgement from " + peer_);
    const uint64_t applied = in.get<uint64_t>();
    if (applied < acked_ || applied > requested_) {
      throw Error(ErrorCategory::kTransport, peer_ + " acknowledged " + std::to_string(applied) + " operations, but " +
                                                 std::to_string(acked_) + " were acknowledged and " +
                                                 std::to_string(requested_) + " asked for");
    }
    acked_ = applied;
    return true;
  }

  std::mutex mutex_;
  std::string peer_;
  net::Socket outgoing_;
  int64_t sendTimeoutMs_;
  uint64_t posted_ = 0;     // operations sent
  uint64_t requested_ = 0;  // the highest count a flush frame asked the peer to acknowledge
  uint64_t acked_ = 0;      // the highest count the peer acknowledged
  std::array<uint8_t, kAckBytes> ack_{};
  size_t ackFilled_ = 0;  // bytes of a partly received ack (a flush may time out in the middle of one)
  std::string broken_;    // why the outgoing stream is unusable; empty while it is fine
  gpu::PinnedHostBuffer staging_;
  // Last, so that it goes first: the receiving thread stops before anything else is released.
  Receiver receiver_;
};

// Why `candidate` is not the peer's stream, or "" when it presents the hello the peer promised.
std::string checkHello(const net::Socket& candidate, const Token& expected, const ConnectionSetup& setup,
                       const Deadline& deadline) {
  std::array<uint8_t, kHelloBytes> hello{};
  try {
    candidate.recvAll(hello.data(), hello.size(), deadline.capped(kHelloTimeoutMs), "the connecting side");
  } catch (const Error& error) {
    return error.what();
  }
  ByteReader in(hello, "hello");
  const uint32_t magic = in.get<uint32_t>();
  Token token{};
  in.getBytes(token);
  const int32_t from = in.get<int32_t>();
  const int32_t to = in.get<int32_t>();
  if (magic != kHelloMagic) return "not a Loom TCP hello";
  // Compare every byte whatever the first difference, so timing says nothing about the token.
  uint8_t difference = 0;
  for (size_t i = 0; i < kTokenBytes; ++i) difference |= uint8_t(token[i] ^ expected[i]);
  if (difference != 0) return "wrong token";
  if (from != setup.remoteRank || to != setup.localRank) {
    return "hello from rank " + std::to_string(from) + " to rank " + std::to_string(to);
  }
  return "";
}

// The peer's incoming stream: the first connection to `listener` with the right hello. Anything
// else is refused with a warning, and the wait goes on until the deadline.
net::Socket acceptPeer(const net::Socket& listener, const Token& expected, const ConnectionSetup& setup,
                       const Deadline& deadline) {
  while (true) {
    if (!pollFor(listener.fd(), POLLIN, deadline)) {
      throw Error(ErrorCategory::kTimeout, rankText(setup.remoteRank) + " did not connect to " +
                                               listener.localAddress().toString() + " within " +
                                               std::to_string(deadline.timeoutMs()) + " ms");
    }
    net::SocketAddress from;
    net::Socket candidate = listener.accept(&from);
    if (!candidate.valid()) continue;
    const std::string why = checkHello(candidate, expected, setup, deadline);
    if (why.empty()) return candidate;
    logWarning(pairText(setup.localRank, setup.remoteRank) + ": setup: refused a connection from " + from.toString() +
               " (" + why + "); still waiting for " + rankText(setup.remoteRank));
  }
}

std::shared_ptr<Connection> establish(const ConnectionSetup& setup) {
  const Deadline deadline(setup.timeoutMs);
  const std::string peer = rankText(setup.remoteRank);
  // Listen where the bootstrap does: that interface is known to reach the peer.
  const net::SocketAddress own = net::SocketAddress::parse(setup.bootstrap.peerAddress(setup.localRank),
                                                           "bootstrap address of " + rankText(setup.localRank));
  const net::Socket listener = net::Socket::listen(own.withPort(0));
  const Endpoint mine{listener.localAddress(), randomToken()};
  setup.bootstrap.send(setup.remoteRank, setup.tag, encodeEndpoint(mine));
  const Endpoint theirs = decodeEndpoint(setup.bootstrap.recv(setup.remoteRank, setup.tag), "tcp endpoint of " + peer);
  // The peer listens before it sends its endpoint, so a refused connection is a real failure. The
  // connect and the hello complete in the kernel's backlog, before the peer accepts: no deadlock.
  net::Socket outgoing = net::Socket::connect(theirs.listener, deadline, false, peer);
  const std::vector<uint8_t> hello = encodeHello(mine.token, setup.localRank, setup.remoteRank);
  outgoing.sendAll(hello.data(), hello.size(), deadline, peer);
  net::Socket incoming = acceptPeer(listener, theirs.token, setup, deadline);
  return makeConnection(setup.localRank, setup.remoteRank, std::move(outgoing), std::move(incoming), setup.timeoutMs);
}

}  // namespace

Token randomToken() {
  std::random_device random;
  Token token{};
  for (size_t i = 0; i < kTokenBytes; i += 4) {
    const uint32_t word = random();
    std::memcpy(token.data() + i, &word, 4);
  }
  return token;
}

std::vector<uint8_t> encodeEndpoint(const Endpoint& endpoint) {
  const net::SocketAddress::Packed address = endpoint.listener.pack();
  ByteWriter out;
  out.put(kEndpointMagic);
  putEach(out, address);
  putEach(out, endpoint.token);
  return out.take();
}

Endpoint decodeEndpoint(std::span<const uint8_t> bytes, const std::string& what) {
  ByteReader in(bytes, what);
  if (in.get<uint32_t>() != kEndpointMagic) {
    throw Error(ErrorCategory::kInvalidArgument, what + ": not a tcp endpoint record");
  }
  net::SocketAddress::Packed address{};
  in.getBytes(address);
  Endpoint endpoint;
  in.getBytes(endpoint.token);
  in.finish();
  std::optional<net::SocketAddress> listener = net::SocketAddress::unpack(address.data());
  if (!listener) throw Error(ErrorCategory::kInvalidArgument, what + ": the address is neither IPv4 nor IPv6");
  endpoint.listener = *listener;
  return endpoint;
}

std::vector<uint8_t> encodeHello(const Token& token, int fromRank, int toRank) {
  ByteWriter out;
  out.put(kHelloMagic);
  putEach(out, token);
  out.put(int32_t(fromRank)).put(int32_t(toRank));
  return out.take();
}

std::vector<uint8_t> encodeFrame(const FrameHeader& header) {
  ByteWriter out;
  out.put(header.kind).put(header.id).put(header.offset).put(header.argument);
  return out.take();
}

FrameHeader decodeFrame(std::span<const uint8_t, kFrameHeaderBytes> bytes) {
  ByteReader in(bytes, "tcp frame header");
  FrameHeader header;
  header.kind = in.get<FrameKind>();
  header.id = in.get<uint64_t>();
  header.offset = in.get<uint64_t>();
  header.argument = in.get<uint64_t>();
  return header;
}

std::shared_ptr<Connection> makeConnection(int localRank, int remoteRank, net::Socket outgoing, net::Socket incoming,
                                           int64_t sendTimeoutMs) {
  return std::make_shared<TcpConnection>(localRank, remoteRank, std::move(outgoing), std::move(incoming),
                                         sendTimeoutMs);
}

}  // namespace loom::tcp

namespace loom {

std::shared_ptr<Connection> connectTcp(const ConnectionSetup& setup) {
  try {
    return tcp::establish(setup);
  } catch (const Error& error) {
    throw Error(error.category(), tcp::pairText(setup.localRank, setup.remoteRank) + ": setup: " + error.what());
  }
}

}  // namespace loom
