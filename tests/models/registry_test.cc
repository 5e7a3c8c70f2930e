// The model registry (models/registry.h): a model registered from this file, as a new model's
// .cc would, is found by name beside the built-in ones that //models:by_name links in.
#include "models/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/nn/linear.h"
#include "models/by_name.h"

namespace dpe::models {
namespace {

// A model as a user would add one: its class, a factory and one registration line.
class TestClassifier : public Cloneable<TestClassifier> {
 public:
  explicit TestClassifier(Generator& gen) {
    register_module("fc", std::make_shared<nn::Linear>(28 * 28, 10, gen));
  }
  Tensor forward(const Tensor& x) override {
    return child("fc").forward(x.reshape(Shape{x.size(0), 28 * 28}));
  }
  std::string repr() const override { return "TestClassifier"; }
};

std::shared_ptr<Module> make_test_classifier(Generator& gen, const ModelOptions&) {
  return std::make_shared<TestClassifier>(gen);
}

DPE_REGISTER_MODEL("test-classifier", make_test_classifier,
                   image_classifier("one linear layer, for registry_test", 28));

bool has_name(const std::string& name) {
  const std::vector<std::string> names = model_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dpe::Error";
  return "";
}

TEST(ModelRegistry, AModelRegisteredInItsOwnFileIsFoundByName) {
  EXPECT_TRUE(has_model("test-classifier"));
  EXPECT_TRUE(has_name("test-classifier"));
  const ModelInfo info = model_info("test-classifier");
  EXPECT_EQ(info.task, ModelTask::kImageClassification);
  EXPECT_EQ(info.image_size, 28);
  EXPECT_EQ(info.summary, "one linear layer, for registry_test");
  EXPECT_FALSE(is_language_model("test-classifier"));
  Generator gen(0);
  std::shared_ptr<Module> m = make_model("test-classifier", gen);
  ASSERT_NE(dynamic_cast<TestClassifier*>(m.get()), nullptr);
  EXPECT_EQ((*m)(Tensor::zeros(Shape{3, 1, 28, 28})).shape(), (Shape{3, 10}));
}

// The built-in models register from their own files too; alwayslink keeps each registration in
// a binary that references nothing else of the model's library.
TEST(ModelRegistry, TheBuiltInModelsSurviveLinking) {
  for (const char* name :
       {"toy", "mlp", "convnet", "resnet50", "resnet-tiny", "gpt-small", "gpt2"}) {
    EXPECT_TRUE(has_model(name)) << name;
  }
  EXPECT_TRUE(is_language_model("gpt-small"));
  EXPECT_TRUE(is_language_model("gpt2"));
  EXPECT_EQ(model_info("gpt-small").block_size, 128);
  EXPECT_EQ(model_info("gpt2").block_size, 1024);
  EXPECT_EQ(model_info("toy").task, ModelTask::kRegression);
  EXPECT_EQ(model_info("resnet50").image_size, 224);
  // Regression first, then image classifiers, then language models, each by name.
  const std::vector<std::string> names = model_names();
  EXPECT_EQ(names.front(), "toy");
  EXPECT_EQ(std::vector<std::string>(names.end() - 2, names.end()),
            (std::vector<std::string>{"gpt-small", "gpt2"}));
  Generator gen(0);
  ModelOptions options;
  options.in_channels = 1;
  EXPECT_EQ((*make_model("resnet-tiny", gen, options))(Tensor::zeros(Shape{2, 1, 28, 28})).shape(),
            (Shape{2, 10}));
}

TEST(ModelRegistry, UnknownAndDuplicateNamesAreErrors) {
  Generator gen(0);
  const std::string msg = error_of([&] { make_model("gpt3", gen); });
  EXPECT_NE(msg.find("unknown model 'gpt3' (registered: toy, "), std::string::npos) << msg;
  EXPECT_NE(msg.find("test-classifier"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { model_info("gpt3"); }).find("unknown model 'gpt3'"), std::string::npos);
  EXPECT_FALSE(has_model("gpt3"));
  EXPECT_FALSE(is_language_model("gpt3"));
  EXPECT_NE(error_of([&] {
              register_model("mlp", make_test_classifier, image_classifier("again", 28));
            }).find("model 'mlp' is already registered"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              register_model("no-size", make_test_classifier, image_classifier("no size", 0));
            }).find("needs an image size"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              register_model("", make_test_classifier, regression(""));
            }).find("empty model name"),
            std::string::npos);
  ModelOptions negative;
  negative.vocab_size = -1;
  EXPECT_NE(error_of([&] { make_model("gpt-small", gen, negative); }).find("is negative"),
            std::string::npos);
}

}  // namespace
}  // namespace dpe::models
