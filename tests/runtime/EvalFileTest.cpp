// EvalFileTest: llm.c's multiple-choice evaluation file (runtime/files/eval_file.h)
// read back in both versions, every bad file refused with its place named, and
// the rows and scores of runtime/train/eval.h.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/files/eval_file.h"
#include "runtime/train/eval.h"

namespace {

struct example {
  int64_t label;
  std::vector<int64_t> context;
  std::vector<std::vector<int64_t>> completions;
};

// One example's fields as tools/prepare_eval.py writes them.
std::vector<int64_t> fields_of(int64_t index, const example& x, int width) {
  std::vector<int64_t> f = {width == 2 ? 0xFFFF : 0xFFFFFFFFLL,
                            0,
                            index,
                            x.label,
                            static_cast<int64_t>(x.completions.size()),
                            static_cast<int64_t>(x.context.size())};
  f.insert(f.end(), x.context.begin(), x.context.end());
  for (const auto& c : x.completions) {
    f.push_back(static_cast<int64_t>(c.size()));
    f.insert(f.end(), c.begin(), c.end());
  }
  f[1] = static_cast<int64_t>(f.size()) * width;
  return f;
}

std::string bytes_of(const std::vector<int64_t>& fields, int width) {
  std::string out;
  for (int64_t v : fields) {
    const uint32_t x = static_cast<uint32_t>(v);
    out.append(reinterpret_cast<const char*>(&x), static_cast<size_t>(width));
  }
  return out;
}

std::string header_of(int32_t magic, int32_t version, int32_t count, int32_t longest) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic, h[1] = version, h[2] = count, h[3] = longest;
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 4);
}

// A whole file of these examples, version 1 (uint16) or 2 (uint32).
std::string file_of(const std::vector<example>& xs, int version = 1) {
  const int width = version == 1 ? 2 : 4;
  std::string body;
  int64_t longest = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::vector<int64_t> f = fields_of(static_cast<int64_t>(i), xs[i], width);
    longest = std::max(longest, f[1]);
    body += bytes_of(f, width);
  }
  return header_of(kEvalFileMagic, version, static_cast<int32_t>(xs.size()),
                   static_cast<int32_t>(longest)) +
         body;
}

const std::vector<example> kExamples = {
    {1, {1, 2, 3}, {{4, 5}, {6}, {7, 8, 9}, {10}}},
    {0, {11}, {{12, 13, 14}, {15}}},
};

class EvalFile : public ::testing::Test {
 protected:
  std::string path(const std::string& bytes) {
    const std::filesystem::path p =
        std::filesystem::temp_directory_path() /
        (std::string("eval_file_test_") +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".bin");
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  // The error reading these bytes for a model of vocab 64, context 8.
  std::string error_of(const std::string& bytes) {
    try {
      eval_file_read(path(bytes), 64, 8);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(read without error)";
  }
};

TEST_F(EvalFile, ReadsBothVersions) {
  for (int version : {1, 2}) {
    const eval_file f = eval_file_read(path(file_of(kExamples, version)), 64, 8);
    EXPECT_EQ(f.version, version);
    ASSERT_EQ(f.examples.size(), 2u);
    EXPECT_EQ(f.examples[0].label, 1);
    EXPECT_EQ(f.examples[0].context, (std::vector<int32_t>{1, 2, 3}));
    ASSERT_EQ(f.examples[0].completions.size(), 4u);
    EXPECT_EQ(f.examples[0].completions[2], (std::vector<int32_t>{7, 8, 9}));
    EXPECT_EQ(f.examples[1].completions[0], (std::vector<int32_t>{12, 13, 14}));
  }
}

TEST_F(EvalFile, Version2HoldsTokensPastUint16) {
  const eval_file f = eval_file_read(path(file_of({{0, {70000}, {{128000}}}}, 2)), 128256, 8);
  EXPECT_EQ(f.examples[0].completions[0][0], 128000);
}

TEST_F(EvalFile, BadFilesAreNamedWithTheirPlace) {
  const std::string good = file_of(kExamples);
  EXPECT_NE(error_of(good.substr(0, 100)).find("100 bytes, shorter than the 1024-byte header"),
            std::string::npos);
  std::string magic = good;
  const int32_t token_magic = 20240520;
  std::memcpy(magic.data(), &token_magic, 4);
  EXPECT_NE(error_of(magic).find("not an evaluation file: magic 20240520 at byte 0, expected "
                                 "20240522"),
            std::string::npos)
      << error_of(magic);
  EXPECT_NE(error_of(header_of(kEvalFileMagic, 3, 1, 10)).find("version 3 at byte 4"),
            std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 3))
                .find("example 1: truncated: the file ends at byte 1087, inside completion 1's "
                      "token count"),
            std::string::npos)
      << error_of(good.substr(0, good.size() - 3));
  EXPECT_NE(error_of(good + std::string(4, '\0')).find("4 bytes after the last of the header's 2"),
            std::string::npos);
  std::string more = good;
  const int32_t three = 3;
  std::memcpy(more.data() + 8, &three, 4);
  EXPECT_NE(error_of(more).find("the header says 3 examples, the file ends after 2"),
            std::string::npos);
  EXPECT_NE(error_of(file_of({{0, {1, 2}, {{3}, {64}}}}))
                .find("example 0: completion 1: token 64 at byte 1046 is not below the model's "
                      "vocabulary of 64"),
            std::string::npos)
      << error_of(file_of({{0, {1, 2}, {{3}, {64}}}}));
  EXPECT_NE(error_of(file_of({kExamples[0], {0, {1, 2, 3, 4, 5}, {{1}, {2, 3, 4, 5}}}}))
                .find("example 1 (at byte 1064): its context (5 tokens) and completion 1 (4 "
                      "tokens) make 9 tokens, longer than the model's context of 8"),
            std::string::npos)
      << error_of(file_of({kExamples[0], {0, {1, 2, 3, 4, 5}, {{1}, {2, 3, 4, 5}}}}));
  EXPECT_NE(error_of(file_of({{4, {1}, {{1}, {2}, {3}, {4}}}}))
                .find("example 0 (at byte 1024): label 4 is out of range for its 4 completions"),
            std::string::npos);
  EXPECT_NE(error_of(file_of({{0, {}, {{1}}}})).find("its context is empty"), std::string::npos);
  std::string index = good;
  index[1024 + 4] = 7;  // example 0's index field
  EXPECT_NE(error_of(index).find("its index field says 7"), std::string::npos);
  std::string count = good;
  count[1024 + 2] = 2;  // example 0's byte count
  EXPECT_NE(error_of(count).find("its byte count says 2 but its fields take 40"), std::string::npos)
      << error_of(count);
  std::string delimiter = good;
  delimiter[1024] = 0;
  EXPECT_NE(error_of(delimiter).find("expected the example delimiter 65535, found 65280"),
            std::string::npos)
      << error_of(delimiter);
}

// The rows a pass runs and the losses read back from them.
TEST(Eval, RowsAndCompletionLosses) {
  eval_file f;
  for (const example& x : kExamples) {
    eval_example e;
    e.label = x.label;
    e.context.assign(x.context.begin(), x.context.end());
    for (const auto& c : x.completions)
      e.completions.emplace_back(c.begin(), c.end());
    f.examples.push_back(e);
  }
  const std::vector<eval_row> rows = eval_rows_of(f, 0, 2);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[5].example, 1);
  EXPECT_EQ(rows[5].completion, 1);
  EXPECT_EQ(eval_candidate_offsets(f, 2), (std::vector<int64_t>{0, 4, 6}));
  std::vector<int32_t> tokens(8), targets(8);
  eval_fill_row(f, {0, 2}, 8, tokens.data(), targets.data());
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 3, 7, 8, 9, 0, 0}));
  EXPECT_EQ(targets, (std::vector<int32_t>{2, 3, 7, 8, 9, 0, 0, 0}));
  // The completion's targets are at positions 2, 3, 4.
  const std::vector<float> losses = {100, 200, 1, 2, 4, 300, 400, 500};
  EXPECT_EQ(eval_completion_loss(f, {0, 2}, losses.data()), 7);
}

// acc takes the lowest sum, acc_norm the lowest mean per completion token
// (llm.c's); a tie goes to the first.
TEST(Eval, AccByTheSumAccNormByTheMean) {
  eval_file f;
  eval_example x;
  x.label = 1;
  x.context = {1};
  x.completions = {{2}, {3, 4, 5}, {6, 7}};
  f.examples = {x, x};
  f.examples[1].label = 0;
  // Example 0: sums 2, 3, 4 (means 2, 1, 2): by sum 0, by mean 1 (the label).
  // Example 1: sums 1, 3, 1 (means 1, 1, 0.5): by sum the first of the tie, 0 (the label).
  const std::vector<double> sums = {2, 3, 4, 1, 3, 1};
  const eval_prediction p = eval_predict(f.examples[0], sums.data());
  EXPECT_EQ(p.by_sum, 0);
  EXPECT_EQ(p.by_mean, 1);
  const eval_scores s = eval_score(f, 2, sums);
  EXPECT_EQ(s.examples, 2);
  EXPECT_EQ(s.correct, 1);
  EXPECT_EQ(s.correct_norm, 1);
  EXPECT_EQ(s.acc(), 0.5);
  EXPECT_EQ(eval_score(f, 1, sums).correct_norm, 1);
  EXPECT_EQ(eval_score(f, 1, sums).correct, 0);
}

}  // namespace
