// An image-classification data set held in host memory, and its loaders from IDX files.
//
// Contract: images are count*features floats, row-major, pixels mapped x/255 then standardised
// with the Fashion-MNIST training-set mean and std; labels are count ints in [0, classes).
// Loaders throw ls::Error naming the files on any shape, count or label problem; an empty data
// set is an error. A loaded Dataset is immutable in practice and safe to read from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls::data {

// Fashion-MNIST training-set pixel statistics (after x/255), used to standardise inputs.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

struct Dataset {
  std::string name;
  int64_t count = 0;
  int64_t features = 0;
  int classes = 0;
  std::vector<float> images;   // count * features, normalised
  std::vector<int32_t> labels;  // count
};

// Images must be a 3-D IDX (N, rows, cols) and labels a 1-D IDX (N) with every label < classes.
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path, int classes);

enum class Split { kTrain, kTest };

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir (10 classes). Debian's
// dataset-fashion-mnist package installs them under /usr/share/datasets/fashion-mnist.
Dataset load_fashion_mnist(const std::string& dir, Split split);

}  // namespace ls::data
