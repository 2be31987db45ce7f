// read_layers when the reader fails rather than answers: fake readers (shell
// scripts that say a version, then die) killed by a signal, exiting non-zero
// without a word or with one. Runs without Clang.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dsl/layer_reader/ReadLayers.h"

namespace fsdpgen::layers {
namespace {

namespace fs = std::filesystem;

// A header to read (the reader never looks at it) and a fake reader in a
// fresh directory; `body` runs for a header after answering --version.
struct FakeReader {
  fs::path dir, header, reader;
  explicit FakeReader(const std::string& name, const std::string& body)
      : dir(fs::path(testing::TempDir()) / ("reader_failure_" + name)),
        header(dir / "layer.h"),
        reader(dir / "fsdpgen-layers") {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(header) << "// a header\n";
    std::ofstream(reader) << "#!/bin/sh\n[ \"$1\" = --version ] && echo 'fake reader 1' && exit 0\n"
                          << body << "\n";
    fs::permissions(reader, fs::perms::owner_all);
  }
  ReadResult read() const { return read_layers(reader.string(), header.string(), ""); }
};

TEST(ReaderFailure, KilledBySignalNamesTheSignalAndTheHeader) {
  const FakeReader fake("segv", "kill -SEGV $$");
  const ReadResult r = fake.read();
  EXPECT_FALSE(r.layers);
  EXPECT_EQ(r.diagnostics, "the layer reader " + fake.reader.string() +
                               " was killed by signal 11 (Segmentation fault) reading " +
                               fake.header.string());
}

// What it printed before it died follows the line saying how it died.
TEST(ReaderFailure, KilledBySignalKeepsWhatTheReaderSaid) {
  const FakeReader fake("abort", "echo 'LLVM ERROR: out of memory'; kill -ABRT $$");
  const ReadResult r = fake.read();
  EXPECT_FALSE(r.layers);
  EXPECT_EQ(r.diagnostics, "the layer reader " + fake.reader.string() +
                               " was killed by signal 6 (Aborted) reading " + fake.header.string() +
                               "\nLLVM ERROR: out of memory\n");
}

TEST(ReaderFailure, SilentExitStatusIsNamed) {
  const FakeReader fake("exit7", "exit 7");
  const ReadResult r = fake.read();
  EXPECT_FALSE(r.layers);
  EXPECT_EQ(r.diagnostics, "the layer reader " + fake.reader.string() +
                               " exited with status 7 reading " + fake.header.string() +
                               " without a message");
}

// A reader that says why it failed is its own message, as Clang's are.
TEST(ReaderFailure, AReadersMessageIsKeptAsItIs) {
  const FakeReader fake("said", "echo 'layer.h:1:1: error: no layer'; exit 1");
  const ReadResult r = fake.read();
  EXPECT_FALSE(r.layers);
  EXPECT_EQ(r.diagnostics, "layer.h:1:1: error: no layer\n");
}

}  // namespace
}  // namespace fsdpgen::layers
