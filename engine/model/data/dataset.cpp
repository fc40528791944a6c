// Turns a pair of IDX files into a normalised Dataset and finds Fashion-MNIST's files on disk.
// Normalisation goes through a 256-entry table so every pixel value maps to exactly one float,
// the same one the tests compute with the same float expression.
#include <lockstep/data/dataset.h>

#include <array>
#include <filesystem>

#include <lockstep/error.h>
#include "engine/model/data/idx.h"
#include "ops/softmax_xent.h"

static_assert(ls::data::kIgnoreLabel == ls::kIgnoreLabel,
              "the public data::kIgnoreLabel must be the label the loss skips");

namespace ls::data {

bool examples_fit(int64_t count, int64_t features, int64_t label_width, size_t float_inputs,
                  size_t token_inputs, size_t labels) {
  if (count <= 0 || features <= 0 || label_width <= 0) return false;
  if (float_inputs != 0 && token_inputs != 0) return false;
  const size_t n = static_cast<size_t>(count);
  return float_inputs + token_inputs == n * static_cast<size_t>(features) &&
         labels == n * static_cast<size_t>(label_width);
}

void check_dataset(const Dataset& ds) {
  LS_CHECK(examples_fit(ds.count, ds.features, ds.label_width, ds.images.size(), ds.tokens.size(),
                        ds.labels.size()),
           "data set '", ds.name, "' is malformed: ", ds.count, " examples of ", ds.features,
           " features and ", ds.label_width, " label(s), but ", ds.images.size(), " float inputs, ",
           ds.tokens.size(), " token inputs and ", ds.labels.size(),
           " labels; fill exactly one of images and tokens with count * features values and "
           "labels with count * label_width (an empty data set is an error too)");
}
namespace {

std::array<float, 256> normalisation_table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) {
    table[static_cast<size_t>(i)] =
        (static_cast<float>(i) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }
  return table;
}

// Returns dir/base.gz if it exists, else dir/base if it exists; else "" and, so the error can say
// what was looked for, records both names in `missing`.
std::string find_file(const std::filesystem::path& dir, const std::string& base,
                      std::vector<std::string>& missing) {
  for (const std::string& name : {base + ".gz", base}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / name, ec)) return (dir / name).string();
  }
  missing.push_back(base + ".gz");
  missing.push_back(base);
  return "";
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path,
                      int classes) {
  LS_CHECK_IO(classes > 0, "load_idx_pair('", images_path, "', '", labels_path, "'): classes is ",
              classes, "; pass the number of classes (> 0), e.g. 10 for Fashion-MNIST");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  LS_CHECK_IO(
      images.dims.size() == 3, "images file '", images_path, "' has ", images.dims.size(),
      " dims but must have 3 (count, rows, cols); did you swap the images and labels files?");
  LS_CHECK_IO(labels.dims.size() == 1, "labels file '", labels_path, "' has ", labels.dims.size(),
              " dims but must have 1 (count); did you swap the images and labels files?");
  int64_t count = images.dims[0];
  LS_CHECK_IO(count == labels.dims[0], "images file '", images_path, "' holds ", count,
              " examples but labels file '", labels_path, "' holds ", labels.dims[0],
              "; the counts must agree: pass files of the same split (both train or both test)");
  LS_CHECK_IO(count > 0, "images file '", images_path, "' and labels file '", labels_path,
              "' hold 0 examples; an empty data set cannot be trained or evaluated on");
  int64_t features = images.dims[1] * images.dims[2];
  LS_CHECK_IO(features > 0, "images file '", images_path, "' has images of ", images.dims[1], "x",
              images.dims[2], " pixels; each image needs at least one pixel");

  Dataset ds;
  ds.name = images_path;
  ds.count = count;
  ds.features = features;
  ds.classes = classes;
  ds.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    uint8_t label = labels.data[static_cast<size_t>(i)];
    LS_CHECK_IO(label < classes, "labels file '", labels_path, "': label at index ", i, " is ",
                int{label}, " but must be < ", classes,
                " (the number of classes); pass the right class count or fix the file");
    ds.labels[static_cast<size_t>(i)] = label;
  }
  static const std::array<float, 256> table = normalisation_table();
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) ds.images[i] = table[images.data[i]];
  return ds;
}

Dataset load_fashion_mnist(const std::string& dir, Split split) {
  namespace fs = std::filesystem;
  const char* prefix = split == Split::kTrain ? "train" : "t10k";
  constexpr const char* kHint =
      "; Debian's dataset-fashion-mnist package installs them under "
      "/usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)";
  std::error_code ec;
  LS_CHECK_IO(fs::is_directory(dir, ec), "Fashion-MNIST directory '", dir,
              "' does not exist or is not a directory; pass the folder holding ", prefix,
              "-images-idx3-ubyte[.gz] and ", prefix, "-labels-idx1-ubyte[.gz]", kHint);
  std::vector<std::string> missing;
  std::string images = find_file(dir, std::string(prefix) + "-images-idx3-ubyte", missing);
  std::string labels = find_file(dir, std::string(prefix) + "-labels-idx1-ubyte", missing);
  LS_CHECK_IO(missing.empty(), "Fashion-MNIST files missing in '", dir, "': tried ", join(missing),
              " and found none of them", kHint);
  Dataset ds = load_idx_pair(images, labels, 10);
  ds.name = std::string("fashion-mnist/") + (split == Split::kTrain ? "train" : "test");
  return ds;
}

}  // namespace ls::data
