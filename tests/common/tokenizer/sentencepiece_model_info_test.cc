// A SentencePiece model's vocabulary and end-of-sentence id as read without the library
// (common/tokenizer/sentencepiece_model_info.h), against the library's own reading of
// models it trains. This test links SentencePiece and no protobuf, as fp8-data does.
#include "common/tokenizer/sentencepiece_model_info.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/tokenizer/sentencepiece_model.h"
#include "gtest/gtest.h"

namespace fp8::tokenizer {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class SentencePieceModelInfoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fp8_spm_info_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream text(dir_ / "text.txt");
    const char* words[] = {"the", "model", "trains", "in", "eight", "bits", "and", "its", "loss", "falls"};
    for (int i = 0; i < 3000; ++i) text << words[(i * 7) % 10] << (i % 9 == 8 ? "\n" : " ");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains a model with extra flags; its bytes.
  std::string train(const std::string& name, const std::string& flags) {
    const std::string prefix = (dir_ / name).string();
    const std::string error = SentencePieceModel::train("--input=" + (dir_ / "text.txt").string() +
                                                        " --model_prefix=" + prefix + " --minloglevel=1 " + flags);
    EXPECT_EQ(error, "");
    return slurp(prefix + ".model");
  }
  fs::path dir_;
};

TEST_F(SentencePieceModelInfoTest, AgreesWithTheLibraryOnTheModelsItTrains) {
  for (const auto& [name, flags] : {std::pair{"bpe", "--vocab_size=60 --model_type=bpe"},
                                    std::pair{"unigram", "--vocab_size=25 --model_type=unigram"},
                                    std::pair{"moved_eos", "--vocab_size=50 --model_type=bpe --bos_id=-1 --eos_id=7"},
                                    std::pair{"no_eos", "--vocab_size=50 --model_type=bpe --eos_id=-1"}}) {
    SCOPED_TRACE(name);
    const std::string bytes = train(name, flags);
    std::string error;
    const std::unique_ptr<SentencePieceModel> model = SentencePieceModel::load(bytes, &error);
    ASSERT_NE(model, nullptr) << error;
    const std::optional<SentencePieceModelInfo> info = read_sentence_piece_model_info(bytes, &error);
    ASSERT_TRUE(info.has_value()) << error;
    EXPECT_EQ(info->pieces, model->piece_size());
    EXPECT_EQ(info->eos_id, model->eos_id());
  }
}

TEST_F(SentencePieceModelInfoTest, BytesThatAreNoModelAreRefused) {
  std::string error;
  EXPECT_FALSE(read_sentence_piece_model_info("", &error).has_value());
  EXPECT_NE(error.find("no pieces"), std::string::npos) << error;
  EXPECT_FALSE(read_sentence_piece_model_info("\x0a\x7f" "abc", &error).has_value());  // a length past the end
  EXPECT_NE(error.find("breaks off"), std::string::npos) << error;
  const std::string model = train("cut", "--vocab_size=40 --model_type=bpe");
  EXPECT_FALSE(read_sentence_piece_model_info(model.substr(0, model.size() / 2 + 1), &error).has_value());
}

}  // namespace
}  // namespace fp8::tokenizer
