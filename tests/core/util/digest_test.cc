#include "core/util/digest.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace chaise::core {
namespace {

std::string hex(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kHex[static_cast<unsigned char>(c) >> 4]);
    out.push_back(kHex[static_cast<unsigned char>(c) & 15]);
  }
  return out;
}

// RFC 1321 and FIPS 180-2 test vectors.
TEST(Digest, KnownVectors) {
  EXPECT_EQ(hex(md5("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(md5("abc").size(), 16u);
  EXPECT_EQ(sha256("abc").size(), 32u);
}

// Each thread keeps its own context, and alternates algorithms on it: under concurrency every
// answer must be the digest of its own input, as computed alone beforehand.
TEST(Digest, ThreadsAndAlternatingAlgorithmsDoNotMix) {
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::vector<std::string>> expected(kThreads);
  auto input = [](int t, int i) { return std::to_string(t) + ":" + std::to_string(i); };
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kEach; ++i)
      expected[t].push_back(md5_hex(input(t, i)) + hex(sha256(input(t, i))));
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round)
        for (int i = 0; i < kEach; ++i)
          if (md5_hex(input(t, i)) + hex(sha256(input(t, i))) != expected[t][i]) ++wrong[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_NE(expected[0][0], expected[0][1]);
}

}  // namespace
}  // namespace chaise::core
