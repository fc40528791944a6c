// A data set held in host memory (images or token sequences), and its loaders from IDX files.
//
// Contract: each example is `features` inputs, either floats (`images`: Fashion-MNIST pixels
// mapped x/255 then standardised with the training-set mean and std) or token ids (`tokens`:
// sequences of `features` tokens, padded with the model's pad id); exactly one of the two is
// filled. Each example has `label_width` labels in [0, classes) or kIgnoreLabel (-100, skipped
// by the loss): 1 for classification, the sequence length for a language model's next tokens.
// Loaders throw ls::Error naming the files on any shape, count or label problem; an empty data
// set is an error. A loaded Dataset is immutable in practice and safe to read from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls::data {

// A label the loss skips (a language model's padding positions), as PyTorch's ignore_index; the
// same value as the ops' ls::kIgnoreLabel (checked in dataset.cpp).
inline constexpr int32_t kIgnoreLabel = -100;

// Fashion-MNIST training-set pixel statistics (after x/255), used to standardise inputs.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

struct Dataset {
  std::string name;
  int64_t count = 0;
  int64_t features = 0;
  int classes = 0;
  int64_t label_width = 1;      // labels per example
  std::vector<float> images;    // count * features, normalised (float inputs), or empty
  std::vector<int32_t> tokens;  // count * features token ids (sequence inputs), or empty
  std::vector<int32_t> labels;  // count * label_width

  bool has_tokens() const { return !tokens.empty(); }
};

// Images must be a 3-D IDX (N, rows, cols) and labels a 1-D IDX (N) with every label < classes.
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path, int classes);

// Whether arrays of these sizes hold `count` examples of `features` inputs (exactly one of the
// float and token arrays filled) and `label_width` labels each; the rule every check of a
// Dataset or a Batch applies.
bool examples_fit(int64_t count, int64_t features, int64_t label_width, size_t float_inputs,
                  size_t token_inputs, size_t labels);

// Raises ls::Error naming the data set when its arrays disagree with count, features and
// label_width (exactly one of images and tokens holds count * features values, labels count *
// label_width); every reader of a Dataset calls it before indexing.
void check_dataset(const Dataset& ds);

enum class Split { kTrain, kTest };

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir (10 classes). Debian's
// dataset-fashion-mnist package installs them under /usr/share/datasets/fashion-mnist.
Dataset load_fashion_mnist(const std::string& dir, Split split);

}  // namespace ls::data
