// Layer declarations from the reader's JSON (the example layers' goldens,
// so this runs without Clang), bound to hyper-parameter values; and
// read_layers: the reader run and cached, or the one line saying it is not
// built.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/layer_reader/ReadLayers.h"

namespace fsdpgen::layers {
namespace {

namespace fs = std::filesystem;

std::string golden(const char* name) {
  std::ifstream in(fs::path(FSDPGEN_SOURCE_DIR) / "tests/layers/golden" / name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LayerDecl, TheExamplesGoldensBindToTheirShapes) {
  std::string error;
  auto layers = parse_layer_json(golden("swiglu_mlp.json"), &error);
  ASSERT_TRUE(layers) << error;
  ASSERT_EQ(layers->size(), 1u);
  const LayerDecl& d = (*layers)[0];
  EXPECT_EQ(d.name, "SwiGluMlp");
  EXPECT_EQ(d.hyper, (std::vector<std::string>{"d_model", "d_ff"}));
  EXPECT_TRUE(d.cuda);  // forward_cuda and backward_cuda (swiglu_mlp.cu)
  auto b = bind_layer(d, {{"d_model", 64}, {"d_ff", 176}}, &error);
  ASSERT_TRUE(b) << error;
  ASSERT_EQ(b->tensors.size(), 3u);
  EXPECT_EQ(b->tensors[0].name, "gate_w");
  EXPECT_EQ(b->tensors[0].shape, (std::vector<int64_t>{176, 64}));
  EXPECT_EQ(b->tensors[2].shape, (std::vector<int64_t>{64, 176}));
  EXPECT_EQ(b->tensors[0].init.kind, Init::Kind::Normal);
  EXPECT_DOUBLE_EQ(b->tensors[0].init.std, 0.02);
  EXPECT_EQ(b->flops_per_token, 6 * 64 * 176);
  EXPECT_EQ(b->saved_bytes_per_token(2), 3 * 176 * 2);
  EXPECT_EQ(b->scratch_bytes_per_token(4), 2 * 176 * 4);
}

TEST(LayerDecl, BindingErrorsNameTheLayerAndTheMember) {
  std::string error;
  auto layers = parse_layer_json(golden("gelu_mlp.json"), &error);
  ASSERT_TRUE(layers) << error;
  const LayerDecl& d = (*layers)[0];
  EXPECT_FALSE(bind_layer(d, {{"d_model", 64}}, &error));
  EXPECT_EQ(error, "layer 'GeluMlp' needs a value for its hyper-parameter 'd_ff'");
  EXPECT_FALSE(bind_layer(d, {{"d_model", 64}, {"d_ff", 8}, {"heads", 2}}, &error));
  EXPECT_EQ(error, "layer 'GeluMlp' has no hyper-parameter 'heads'");
  EXPECT_FALSE(bind_layer(d, {{"d_model", 64}, {"d_ff", 0}}, &error));
  EXPECT_EQ(error, "layer 'GeluMlp', fc_w's shape \"d_ff\" is 0, not at least 1");
}

// A bound layer's tensors hold at most kMaxLayerElems (2^40) elements
// together, counted in checked arithmetic: the planner multiplies them by
// layers and bytes without overflowing.
TEST(LayerDecl, SizesPastTheLimitNameTheMember) {
  std::string error;
  auto layers = parse_layer_json(golden("gelu_mlp.json"), &error);
  ASSERT_TRUE(layers) << error;
  const LayerDecl& d = (*layers)[0];
  const int64_t k = int64_t{1} << 20;
  EXPECT_TRUE(bind_layer(d, {{"d_model", k / 4}, {"d_ff", k}}, &error)) << error;
  EXPECT_FALSE(bind_layer(d, {{"d_model", k}, {"d_ff", 2 * k}}, &error));
  EXPECT_EQ(error,
            "layer 'GeluMlp', fc_w's shape (1048576, 2097152) has 2199023255552 elements; a "
            "layer's parameters hold at most 1099511627776 (2^40)");
  EXPECT_FALSE(bind_layer(d, {{"d_model", k}, {"d_ff", k}}, &error));
  EXPECT_EQ(error,
            "layer 'GeluMlp', fc_b's shape (1048576) has 1048576 elements, which bring the "
            "layer's parameters to 1099512676352; a layer's parameters hold at most "
            "1099511627776 (2^40)");
}

// A binding's error says where in the header the member's text is (the
// reader's "at"), shown as Clang shows a place; the values alone (a missing
// hyper-parameter) have no place there.
TEST(LayerDecl, BindingErrorsPointAtTheHeadersLine) {
  std::string error;
  auto layers = parse_layer_json(golden("gelu_mlp.json"), &error);
  ASSERT_TRUE(layers) << error;
  const LayerDecl& d = (*layers)[0];
  const int64_t k = int64_t{1} << 20;
  const HeaderAt* at = nullptr;
  EXPECT_FALSE(bind_layer(d, {{"d_model", k}, {"d_ff", 2 * k}}, &error, &at));
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at->line, 21);
  EXPECT_EQ(at->column, 32);
  EXPECT_EQ(header_excerpt("gelu_mlp.h", *at, "here"),
            "gelu_mlp.h:21:32: here\n"
            "   21 |   fsdpgen::layer::Param<T, G, \"d_model, d_ff\", \"normal(0.02)\", "
            "\"muon(in, out)\"> fc_w;\n"
            "      |                                ^");
  EXPECT_FALSE(bind_layer(d, {{"d_model", 64}, {"d_ff", 0}}, &error, &at));
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at->line, 21) << "fc_w's shape \"d_model, d_ff\"";
  EXPECT_FALSE(bind_layer(d, {{"d_model", k}, {"d_ff", k}}, &error, &at));
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at->line, 22) << "fc_b, whose elements pass the limit";
  EXPECT_FALSE(bind_layer(d, {{"d_model", 64}}, &error, &at));
  EXPECT_EQ(at, nullptr) << error;
  EXPECT_TRUE(bind_layer(d, {{"d_model", 64}, {"d_ff", 256}}, &error, &at));
  EXPECT_EQ(at, nullptr);
  EXPECT_EQ(header_excerpt("x.h", HeaderAt{}, "here"), "x.h: here");
}

TEST(LayerDecl, MalformedAnswersAreErrors) {
  std::string error;
  EXPECT_FALSE(parse_layer_json("[1, 2]", &error));
  EXPECT_EQ(error, "not a JSON object");
  EXPECT_FALSE(parse_layer_json(R"({"reader": 7, "layers": []})", &error));
  EXPECT_EQ(error, "written by reader format 7, not 3");
  EXPECT_FALSE(parse_layer_json(
      R"({"reader": 3, "layers": [{"name": "L", "flops": "2 * (", "hyper": []}]})", &error));
  EXPECT_NE(error.find("layer L.flops"), std::string::npos) << error;
}

TEST(ReadLayers, WithoutAReaderOneLineSaysHowToInstallIt) {
  const ReadResult r = read_layers("", "any.h", "");
  EXPECT_FALSE(r.layers);
  EXPECT_EQ(r.diagnostics, reader_missing_message());
  EXPECT_NE(r.diagnostics.find("clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev"),
            std::string::npos);
}

// The reader's answer is cached by the header's bytes: the second read of an
// unchanged header does not run the reader, an edited header does; a bad
// header's diagnostics are Clang's, and nothing is cached for it.
TEST(ReadLayers, AnswersAreCachedByTheHeadersBytes) {
  if (std::string(FSDPGEN_LAYER_READER).empty())
    GTEST_SKIP() << "fsdpgen-layers is not built (no Clang 19): " << reader_missing_message();
  const fs::path dir = fs::path(testing::TempDir()) / "layer_cache";
  fs::remove_all(dir);
  fs::create_directories(dir / "cache");
  const fs::path header = dir / "mlp.h";
  fs::copy_file(fs::path(FSDPGEN_SOURCE_DIR) / "examples/layers/gelu_mlp.h", header);
  ReadResult first = read_layers(FSDPGEN_LAYER_READER, header.string(), (dir / "cache").string());
  ASSERT_TRUE(first.layers) << first.diagnostics;
  EXPECT_FALSE(first.cached);
  EXPECT_EQ((*first.layers)[0].name, "GeluMlp");
  ReadResult second = read_layers(FSDPGEN_LAYER_READER, header.string(), (dir / "cache").string());
  ASSERT_TRUE(second.layers) << second.diagnostics;
  EXPECT_TRUE(second.cached);
  std::ofstream(header, std::ios::app) << "\n// edited\n";
  ReadResult third = read_layers(FSDPGEN_LAYER_READER, header.string(), (dir / "cache").string());
  EXPECT_FALSE(third.cached);
  std::ofstream(dir / "bad.h") << "#include \"layers/fsdpgen_layer.h\"\nstruct {\n";
  ReadResult bad =
      read_layers(FSDPGEN_LAYER_READER, (dir / "bad.h").string(), (dir / "cache").string());
  EXPECT_FALSE(bad.layers);
  EXPECT_NE(bad.diagnostics.find("bad.h:2:9: error: expected '}'"), std::string::npos)
      << bad.diagnostics;
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "cache"))
    ++files;
  EXPECT_EQ(files, 2u);  // the first header and its edit
}

}  // namespace
}  // namespace fsdpgen::layers
