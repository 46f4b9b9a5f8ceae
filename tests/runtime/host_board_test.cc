// HostBoard: the same-host all-gather of small records that the executor's per-call agreement uses.
// Ranks are threads here; tests/executor/test_multiprocess_cpu.py runs it across processes.

#include "loom/host_board.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "communicator_test_util.hpp"

namespace loom {
namespace {

using testing::runCommunicators;

std::vector<uint8_t> recordOf(int rank, uint64_t exchange) {
  std::vector<uint8_t> record(56);
  const uint64_t words[2] = {uint64_t(rank), exchange};
  std::memcpy(record.data(), words, sizeof(words));
  for (size_t i = sizeof(words); i < record.size(); ++i) record[i] = uint8_t(rank * 31 + exchange + i);
  return record;
}

TEST(HostBoard, EveryRankGetsEveryRecordOfEveryExchange) {
  constexpr int kWorld = 4;
  constexpr uint64_t kExchanges = 2000;  // ranks running ahead by one exchange reuse slots often
  auto outcomes = runCommunicators(kWorld, [](Communicator& comm) {
    HostBoard board(comm, 56, 1);
    for (uint64_t exchange = 1; exchange <= kExchanges; ++exchange) {
      const auto records = board.allGather(recordOf(comm.rank(), exchange));
      ASSERT_EQ(records.size(), size_t(kWorld));
      for (int rank = 0; rank < kWorld; ++rank) ASSERT_EQ(records[size_t(rank)], recordOf(rank, exchange)) << rank;
    }
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(HostBoard, ARankThatNeverPostsTimesOutNamingIt) {
  auto outcomes = runCommunicators(
      3,
      [](Communicator& comm) {
        HostBoard board(comm, 8, 2);
        board.allGather(std::vector<uint8_t>(8, 1));
        if (comm.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(900));  // skips the second exchange
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          board.allGather(std::vector<uint8_t>(8, 2));
          ADD_FAILURE() << "the exchange without rank 2 returned";
        } catch (const Error& error) {
          EXPECT_EQ(error.category(), ErrorCategory::kTimeout);
          EXPECT_NE(std::string(error.what()).find("rank 2 did not post exchange 2 within 400 ms"),
                    std::string::npos)
              << error.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(800));
        EXPECT_THROW(board.allGather(std::vector<uint8_t>(8, 3)), Error);  // unusable after a failure
      },
      400);
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(HostBoard, AbortEndsAWaitAtOnce) {
  auto outcomes = runCommunicators(2, [](Communicator& comm) {
    HostBoard board(comm, 8, 3);
    if (comm.rank() == 1) return;  // never posts; its slots stay alive with rank 0's board
    std::thread aborter([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(board.allGather(std::vector<uint8_t>(8, 1)), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
    aborter.join();
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(HostBoard, RefusesBadRecordSizes) {
  auto outcomes = runCommunicators(1, [](Communicator& comm) {
    EXPECT_THROW(HostBoard(comm, 0, 4), Error);
    EXPECT_THROW(HostBoard(comm, HostBoard::kMaxRecordBytes + 1, 4), Error);
    HostBoard board(comm, 16, 4);
    EXPECT_THROW(board.allGather(std::vector<uint8_t>(8)), Error);
    EXPECT_EQ(board.allGather(std::vector<uint8_t>(16, 7)),
              std::vector<std::vector<uint8_t>>{std::vector<uint8_t>(16, 7)});
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace loom
