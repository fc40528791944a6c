// plan_buckets (see parallel/data_parallel/bucket_plan.h).
#include "parallel/data_parallel/bucket_plan.h"

#include <lockstep/error.h>

namespace ls {

std::vector<Bucket> plan_buckets(const std::vector<ParameterExtent>& extents,
                                 int64_t element_bytes, const BucketOptions& options) {
  LS_CHECK(options.cap_bytes > 0 && options.first_bucket_bytes > 0,
           "bucket caps must be positive (cap ", options.cap_bytes, " bytes, first bucket ",
           options.first_bucket_bytes, " bytes)");
  LS_CHECK(options.reduce_dtype == DType::kF32 || options.reduce_dtype == DType::kBF16,
           "BucketOptions::reduce_dtype is ", dtype_name(options.reduce_dtype),
           "; gradients are all-reduced in f32 (DType::kF32, the default) or bf16 (DType::kBF16)");
  LS_ASSERT(element_bytes > 0, "element size must be positive");
  LS_ASSERT(!extents.empty(), "cannot plan buckets for a model without parameters");
  for (size_t i = 0; i < extents.size(); ++i) {
    LS_ASSERT(extents[i].extent > 0, "parameter ", i, " has an empty extent");
    LS_ASSERT(i == 0 || extents[i].offset == extents[i - 1].offset + extents[i - 1].extent,
              "parameter extents must be contiguous and in registration order (parameter ", i,
              " starts at ", extents[i].offset, ")");
  }
  std::vector<Bucket> buckets;
  Bucket current;
  for (int i = static_cast<int>(extents.size()) - 1; i >= 0; --i) {
    const ParameterExtent& p = extents[static_cast<size_t>(i)];
    const int64_t cap = buckets.empty() ? options.first_bucket_bytes : options.cap_bytes;
    const bool fits = (current.count + p.extent) * element_bytes <= cap;
    if (!current.parameters.empty() && !fits) {
      buckets.push_back(std::move(current));
      current = Bucket{};
    }
    // Walking backwards, each parameter extends the bucket downwards.
    current.offset = p.offset;
    current.count += p.extent;
    current.parameters.push_back(i);
  }
  buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace ls
